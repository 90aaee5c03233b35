"""NPU telemetry while a benchmark runs: ``npu-smi info`` sampled in a background thread.

Usage (bench and tune wrap their measured phase with it)::

    sampler = sampler_for(None, interval_s=1.0)   # None when no npu-smi is found
    if sampler is not None:
        with sampler:
            run_the_load()
        report = sampler.report()
        report.tokens_per_joule(output_tokens)

What the report holds, per chip (``npu/chip``): mean and max power (W), max temperature (°C),
mean and max AICore utilisation (%), max HBM use (MB); for the whole node: the energy (J), the
trapezoid integral over time of the summed chip power (A3 prints the power of an NPU on its chip
0 and ``-`` on chip 1, so chips without a power value add nothing), and the per-chip imbalance of
AICore use and HBM use: ``(max - min) / mean`` of the chips' means, in percent, with the busiest
and the idlest chip named. A data-parallel deployment whose chips differ by tens of percent is
routing unevenly (the deployment guide's "monitor utilisation and rebalance").

A sample that fails (npu-smi timing out, a table it cannot read) is counted and its message kept;
the sampler carries on, since telemetry must never stop the benchmark it observes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from ascend_serve.bench import energy
from ascend_serve.bench.periodic import PeriodicSampler
from ascend_serve.stack import npusmi
from ascend_serve.stack.npusmi import Chip

DEFAULT_INTERVAL_S = 1.0
SAMPLE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Sample:
    """One reading of every chip, at ``t`` seconds on the monotonic clock."""

    t: float
    chips: list[Chip]


def _chip_key(chip: Chip) -> str:
    return f"{chip.npu}/{chip.chip}"


def _values(samples: list[Sample], key: str, attr: str) -> list[float]:
    out: list[float] = []
    for sample in samples:
        for chip in sample.chips:
            value = getattr(chip, attr)
            if _chip_key(chip) == key and value is not None:
                out.append(float(value))
    return out


@dataclass
class ChipStats:
    """One chip's figures over the sampled window; None where npu-smi gave no value."""

    chip: str
    name: str
    power_w_mean: float | None
    power_w_max: float | None
    temp_c_max: float | None
    aicore_pct_mean: float | None
    aicore_pct_max: float | None
    hbm_used_mb_max: int | None
    hbm_total_mb: int | None
    health: list[str]

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Imbalance:
    """How far the chips' means are apart: ``(max - min) / mean`` in percent."""

    metric: str
    spread_pct: float
    busiest: str
    idlest: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _imbalance(metric: str, per_chip: dict[str, float]) -> Imbalance | None:
    if len(per_chip) < 2:
        return None
    mean = fmean(per_chip.values())
    busiest = max(per_chip, key=lambda k: per_chip[k])
    idlest = min(per_chip, key=lambda k: per_chip[k])
    spread = (per_chip[busiest] - per_chip[idlest]) / mean * 100 if mean > 0 else 0.0
    return Imbalance(metric=metric, spread_pct=round(spread, 2), busiest=busiest, idlest=idlest)


def energy_joules(samples: list[Sample]) -> float | None:
    """Trapezoid integral of the node's summed chip power; None without two powered samples."""
    return energy.energy_of_power(
        [(s.t, sum(c.power_w for c in s.chips if c.power_w is not None))
         for s in samples if any(c.power_w is not None for c in s.chips)])


@dataclass
class TelemetryReport:
    """What the sampler saw; ``to_dict`` is what bench and tune write into their results."""

    source: str
    interval_s: float
    duration_s: float
    samples: int
    failed_samples: int
    last_error: str | None
    energy_j: float | None
    chips: list[ChipStats] = field(default_factory=list)
    imbalance: list[Imbalance] = field(default_factory=list)

    def tokens_per_joule(self, output_tokens: int) -> float | None:
        """Generated tokens per joule of chip energy; None when the power was not measured."""
        return energy.tokens_per_joule(output_tokens, self.energy_j)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "interval_s": self.interval_s,
            "duration_s": round(self.duration_s, 3),
            "samples": self.samples,
            "failed_samples": self.failed_samples,
            "last_error": self.last_error,
            "energy_j": None if self.energy_j is None else round(self.energy_j, 3),
            "mean_power_w": (None if self.energy_j is None or self.duration_s <= 0
                             else round(self.energy_j / self.duration_s, 3)),
            "chips": [c.to_dict() for c in self.chips],
            "imbalance": {i.metric: i.to_dict() for i in self.imbalance},
        }


def summarise(samples: list[Sample], *, source: str, interval_s: float,
              failed: int = 0, last_error: str | None = None) -> TelemetryReport:
    """The report of a list of samples (exposed for tests and for saved samples)."""
    keys: dict[str, str] = {}
    health: dict[str, list[str]] = {}
    totals: dict[str, int | None] = {}
    for sample in samples:
        for chip in sample.chips:
            key = _chip_key(chip)
            keys.setdefault(key, chip.name)
            seen = health.setdefault(key, [])
            if chip.health not in seen:
                seen.append(chip.health)
            totals[key] = chip.hbm_total_mb if chip.hbm_total_mb is not None else totals.get(key)

    stats: list[ChipStats] = []
    aicore: dict[str, float] = {}
    hbm: dict[str, float] = {}
    for key, name in keys.items():
        power = _values(samples, key, "power_w")
        temp = _values(samples, key, "temp_c")
        core = _values(samples, key, "aicore_pct")
        used = _values(samples, key, "hbm_used_mb")
        if core:
            aicore[key] = fmean(core)
        if used:
            hbm[key] = fmean(used)
        stats.append(ChipStats(
            chip=key, name=name,
            power_w_mean=round(fmean(power), 3) if power else None,
            power_w_max=max(power) if power else None,
            temp_c_max=max(temp) if temp else None,
            aicore_pct_mean=round(fmean(core), 3) if core else None,
            aicore_pct_max=max(core) if core else None,
            hbm_used_mb_max=int(max(used)) if used else None,
            hbm_total_mb=totals.get(key),
            health=health[key],
        ))
    imbalance = [i for i in (_imbalance("aicore_pct", aicore), _imbalance("hbm_used_mb", hbm))
                 if i is not None]
    duration = samples[-1].t - samples[0].t if len(samples) >= 2 else 0.0
    return TelemetryReport(source=source, interval_s=interval_s, duration_s=duration,
                           samples=len(samples), failed_samples=failed, last_error=last_error,
                           energy_j=energy_joules(samples), chips=stats, imbalance=imbalance)


class TelemetrySampler(PeriodicSampler):
    """Samples ``query()`` (the text of ``npu-smi info``) every ``interval_s`` seconds during the
    load (:class:`PeriodicSampler`)."""

    thread_name = "npu-telemetry"

    def __init__(self, query: Callable[[], str], *, source: str,
                 interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(interval_s, "telemetry sampler")
        self._query = query
        self._clock = clock
        self.source = source
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self.failed = 0
        self.last_error: str | None = None

    def sample_once(self) -> None:
        t = self._clock()
        try:
            chips = npusmi.parse_info(self._query())
        except (npusmi.NpuSmiRunError, npusmi.NpuSmiParseError) as exc:
            with self._lock:
                self.failed += 1
                self.last_error = str(exc)
            return
        with self._lock:
            self.samples.append(Sample(t=t, chips=chips))

    def report(self) -> TelemetryReport:
        with self._lock:
            samples = list(self.samples)
            failed, last_error = self.failed, self.last_error
        return summarise(samples, source=self.source, interval_s=self.interval_s,
                         failed=failed, last_error=last_error)


def sampler_for(npu_smi: str | None, interval_s: float = DEFAULT_INTERVAL_S
                ) -> TelemetrySampler | None:
    """A sampler over the node's ``npu-smi`` (``npu_smi`` if given, else found the way
    :func:`npusmi.locate` does); None when there is none (a CPU host)."""
    tool = npusmi.locate(npu_smi)
    if tool is None:
        return None
    return TelemetrySampler(lambda: npusmi.query_info(tool, timeout=SAMPLE_TIMEOUT_S),
                            source=tool, interval_s=interval_s)
