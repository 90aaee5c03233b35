"""Energy while a benchmark runs, and tokens per joule: the one home of both.

Two sources feed :func:`tokens_per_joule`: the NPU chips' power from ``npu-smi``
(:mod:`ascend_serve.bench.telemetry`, on an Ascend node) and, on a CPU host, what the host
offers, tried in this order by :func:`host_meter`:

* RAPL (Intel and AMD x86 CPUs), Linux powercap: ``/sys/class/powercap/intel-rapl:N/energy_uj``,
  a package's cumulative energy in µJ that wraps to 0 after ``max_energy_range_uj``
  (Linux Documentation/power/powercap/powercap.rst). Only the package zones are summed
  (``intel-rapl:N``, not the sub-zones ``intel-rapl:N:M`` they contain). The counter is read
  every ``interval_s`` so that a wrap between two reads is seen: a reading below the previous
  one adds ``max_energy_range_uj``. Kunpeng has no RAPL.
* hwmon (Linux Documentation/hwmon/sysfs-interface.rst): ``energyN_input`` (cumulative µJ:
  deltas summed; a reading below the previous one is a reset and adds nothing) or, without
  energy inputs, ``powerN_input`` / ``powerN_average`` (µW: sampled, integrated over time).
  Every such sensor of every ``/sys/class/hwmon/hwmonN`` is summed and named in the report,
  so check that they do not overlap (a platform meter and the CPU sensors under it).
* IPMI DCMI: ``ipmitool dcmi power reading`` (the node's power in W, as its BMC reports it:
  the whole server), sampled and integrated.

Where none is readable the energy is "not measured" (this project's test machine, and a
Kunpeng server without a BMC power reading).
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascend_serve.bench.periodic import PeriodicSampler

POWERCAP_ROOT = Path("/sys/class/powercap")
HWMON_ROOT = Path("/sys/class/hwmon")
DEFAULT_INTERVAL_S = 1.0
IPMI_TIMEOUT_S = 10.0
_RAPL_PACKAGE = re.compile(r"^intel-rapl:\d+$")
_HWMON_ENERGY = re.compile(r"^energy\d+_input$")
_HWMON_POWER = re.compile(r"^power\d+_(input|average)$")
# ipmitool's DCMI power reading line (ipmitool lib/ipmi_dcmi.c: "Instantaneous power reading:"
# followed by the value and "Watts").
_IPMI_POWER = re.compile(r"Instantaneous power reading:\s*([0-9.]+)\s*Watts", re.IGNORECASE)


def tokens_per_joule(output_tokens: float, energy_j: float | None) -> float | None:
    """Generated tokens per joule; None when the energy was not measured (or is not
    positive). The one computation for the NPU telemetry and the host meters."""
    if energy_j is None or energy_j <= 0:
        return None
    return output_tokens / energy_j


def energy_of_power(points: list[tuple[float, float]]) -> float | None:
    """Trapezoid integral (J) of ``(t seconds, watts)`` points; None with fewer than two."""
    if len(points) < 2:
        return None
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in itertools.pairwise(points))


class MeterError(RuntimeError):
    """A reading failed (a file vanished, ipmitool failed)."""


@dataclass(frozen=True)
class Counter:
    """A cumulative energy counter in µJ; ``wrap_uj``: where it wraps (RAPL), None: a drop is
    a reset (hwmon)."""

    name: str
    path: Path
    wrap_uj: int | None = None

    def read(self) -> int:
        try:
            return int(self.path.read_text().strip())
        except (OSError, ValueError) as exc:
            raise MeterError(f"{self.path}: {exc}") from exc


def counter_delta(previous: int, current: int, wrap_uj: int | None) -> tuple[int, bool]:
    """µJ between two readings of a counter and whether it wrapped (or was reset)."""
    if current >= previous:
        return current - previous, False
    if wrap_uj is None:
        return 0, True  # a reset: the energy since is unknown, count none
    return current + wrap_uj - previous, True


@dataclass
class EnergyReport:
    """What a host meter saw; ``to_dict`` goes under ``telemetry`` in a bench result."""

    source: str
    kind: str  # rapl, hwmon, ipmi
    sensors: list[str]
    interval_s: float
    duration_s: float
    samples: int
    failed_samples: int
    last_error: str | None
    energy_j: float | None
    wraps: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "host", "meter": self.kind, "source": self.source, "sensors": self.sensors,
            "interval_s": self.interval_s, "duration_s": round(self.duration_s, 3),
            "samples": self.samples, "failed_samples": self.failed_samples,
            "last_error": self.last_error, "wraps": self.wraps,
            "energy_j": None if self.energy_j is None else round(self.energy_j, 3),
            "mean_power_w": (None if self.energy_j is None or self.duration_s <= 0
                             else round(self.energy_j / self.duration_s, 3)),
        }


class _Polled(PeriodicSampler):
    """An energy meter read every ``interval_s`` during the load (:class:`PeriodicSampler`); a
    failed sample is counted, never raised."""

    thread_name = "energy-meter"

    def __init__(self, interval_s: float, clock: Callable[[], float]) -> None:
        super().__init__(interval_s, "energy meter")
        self._clock = clock
        self.samples = 0
        self.failed = 0
        self.last_error: str | None = None
        self.first_t: float | None = None
        self.last_t: float | None = None

    def _take(self, t: float) -> None:
        raise NotImplementedError

    def sample_once(self) -> None:
        t = self._clock()
        try:
            with self._lock:
                self._take(t)
                self.samples += 1
                self.first_t = t if self.first_t is None else self.first_t
                self.last_t = t
        except MeterError as exc:
            with self._lock:
                self.failed += 1
                self.last_error = str(exc)

    def _duration(self) -> float:
        if self.first_t is None or self.last_t is None:
            return 0.0
        return self.last_t - self.first_t


class CounterMeter(_Polled):
    """The energy of cumulative µJ counters (RAPL packages, hwmon energy inputs), summed."""

    def __init__(self, counters: list[Counter], *, kind: str, source: str,
                 interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(interval_s, clock)
        self.counters = counters
        self.kind = kind
        self.source = source
        self._previous: dict[str, int] = {}
        self._total_uj = 0
        self.wraps = 0

    def _take(self, t: float) -> None:
        readings = {c.name: c.read() for c in self.counters}  # all or none
        for counter in self.counters:
            now = readings[counter.name]
            before = self._previous.get(counter.name)
            if before is not None:
                delta, wrapped = counter_delta(before, now, counter.wrap_uj)
                self._total_uj += delta
                self.wraps += wrapped
            self._previous[counter.name] = now

    def report(self) -> EnergyReport:
        with self._lock:
            energy = self._total_uj / 1e6 if self.samples >= 2 else None
            return EnergyReport(source=self.source, kind=self.kind,
                                sensors=[c.name for c in self.counters],
                                interval_s=self.interval_s, duration_s=self._duration(),
                                samples=self.samples, failed_samples=self.failed,
                                last_error=self.last_error, energy_j=energy, wraps=self.wraps)


class PowerMeter(_Polled):
    """The energy of a sampled power (W): hwmon power inputs summed, or IPMI's reading."""

    def __init__(self, read_watts: Callable[[], float], *, kind: str, source: str,
                 sensors: list[str], interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(interval_s, clock)
        self._read = read_watts
        self.kind = kind
        self.source = source
        self.sensors = sensors
        self.points: list[tuple[float, float]] = []

    def _take(self, t: float) -> None:
        self.points.append((t, self._read()))

    def report(self) -> EnergyReport:
        with self._lock:
            return EnergyReport(source=self.source, kind=self.kind, sensors=self.sensors,
                                interval_s=self.interval_s, duration_s=self._duration(),
                                samples=self.samples, failed_samples=self.failed,
                                last_error=self.last_error,
                                energy_j=energy_of_power(list(self.points)))


HostMeter = CounterMeter | PowerMeter


def _readable_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def rapl_counters(root: Path = POWERCAP_ROOT) -> list[Counter]:
    """The readable RAPL package counters under ``root`` (with their wrap points)."""
    counters = []
    for zone in sorted(root.glob("intel-rapl:*")):
        if not _RAPL_PACKAGE.match(zone.name):
            continue
        energy, wrap = zone / "energy_uj", _readable_int(zone / "max_energy_range_uj")
        if _readable_int(energy) is None or wrap is None or wrap <= 0:
            continue
        name = (zone / "name").read_text().strip() if (zone / "name").is_file() else zone.name
        counters.append(Counter(f"{zone.name} ({name})", energy, wrap))
    return counters


def _hwmon_label(sensor: Path) -> str:
    device = sensor.parent
    name = _read_text(device / "name") or device.name
    label = _read_text(sensor.with_name(sensor.name.split("_")[0] + "_label"))
    return f"{device.name}/{sensor.name} ({name}{', ' + label if label else ''})"


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def hwmon_sensors(root: Path = HWMON_ROOT) -> tuple[list[Counter], list[tuple[str, Path]]]:
    """The readable hwmon energy inputs (µJ counters) and power inputs (µW) under ``root``."""
    energy: list[Counter] = []
    power: list[tuple[str, Path]] = []
    for device in sorted(root.glob("hwmon*")):
        for sensor in sorted(device.iterdir()) if device.is_dir() else []:
            if _readable_int(sensor) is None:
                continue
            if _HWMON_ENERGY.match(sensor.name):
                energy.append(Counter(_hwmon_label(sensor), sensor))
            elif _HWMON_POWER.match(sensor.name):
                power.append((_hwmon_label(sensor), sensor))
    # A sensor with both an input and an average: keep one (the input) per power channel.
    channels: dict[tuple[Path, str], tuple[str, Path]] = {}
    for label, path in power:
        key = (path.parent, path.name.split("_")[0])
        if key not in channels or path.name.endswith("_input"):
            channels[key] = (label, path)
    return energy, list(channels.values())


def parse_ipmi_power(text: str) -> float:
    """The watts of ``ipmitool dcmi power reading``'s output; :class:`MeterError` without."""
    match = _IPMI_POWER.search(text)
    if match is None:
        raise MeterError("ipmitool dcmi power reading: no 'Instantaneous power reading' line")
    return float(match.group(1))


def ipmi_reader(ipmitool: str, timeout: float = IPMI_TIMEOUT_S) -> Callable[[], float]:
    def read() -> float:
        try:
            done = subprocess.run([ipmitool, "dcmi", "power", "reading"], capture_output=True,
                                  text=True, timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise MeterError(f"{ipmitool} dcmi power reading: {exc}") from exc
        if done.returncode != 0:
            raise MeterError(f"{ipmitool} dcmi power reading: exit {done.returncode}: "
                             f"{(done.stderr or done.stdout).strip()[:200]}")
        return parse_ipmi_power(done.stdout)

    return read


@dataclass
class Probe:
    """What :func:`host_meter` found: the meter, or why there is none."""

    meter: HostMeter | None
    tried: list[str] = field(default_factory=list)

    @property
    def reason(self) -> str:
        return "host energy not measured: " + "; ".join(self.tried)


def host_meter(interval_s: float = DEFAULT_INTERVAL_S, *, powercap: Path = POWERCAP_ROOT,
               hwmon: Path = HWMON_ROOT, ipmitool: str | None = None,
               find_ipmitool: bool = True) -> Probe:
    """The first readable host energy source (RAPL, hwmon, IPMI), see the module doc."""
    tried: list[str] = []
    counters = rapl_counters(powercap)
    if counters:
        return Probe(CounterMeter(counters, kind="rapl", source=str(powercap),
                                  interval_s=interval_s))
    tried.append(f"no readable RAPL package counter under {powercap}")
    energy, power = hwmon_sensors(hwmon)
    if energy:
        return Probe(CounterMeter(energy, kind="hwmon", source=str(hwmon),
                                  interval_s=interval_s))
    if power:
        paths = [p for _, p in power]

        def watts() -> float:
            total = 0
            for path in paths:
                value = _readable_int(path)
                if value is None:
                    raise MeterError(f"{path}: not readable")
                total += value
            return total / 1e6

        return Probe(PowerMeter(watts, kind="hwmon", source=str(hwmon),
                                sensors=[label for label, _ in power], interval_s=interval_s))
    tried.append(f"no readable hwmon energy or power input under {hwmon}")
    tool = ipmitool or (shutil.which("ipmitool") if find_ipmitool else None)
    if tool:
        read = ipmi_reader(tool)
        try:
            read()
        except MeterError as exc:
            tried.append(f"IPMI: {exc}")
        else:
            return Probe(PowerMeter(read, kind="ipmi", source=f"{tool} dcmi power reading",
                                    sensors=["dcmi power reading"], interval_s=interval_s))
    else:
        tried.append("no ipmitool")
    return Probe(None, tried)
