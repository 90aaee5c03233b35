"""Host energy meters (RAPL with its counter's wraparound, hwmon energy and power inputs, IPMI)
on fake sysfs trees, and the one tokens-per-joule computation they share with the NPU path."""

from __future__ import annotations

import itertools
import stat
from pathlib import Path

import pytest

from ascend_serve.bench import energy
from ascend_serve.bench.telemetry import TelemetryReport

WRAP_UJ = 262143328850  # a package's max_energy_range_uj as Linux prints it (about 2^32 units)


def rapl_zone(root: Path, name: str, energy_uj: int, label: str = "package-0",
              wrap: int = WRAP_UJ) -> Path:
    zone = root / name
    zone.mkdir(parents=True)
    (zone / "name").write_text(label + "\n")
    (zone / "energy_uj").write_text(f"{energy_uj}\n")
    (zone / "max_energy_range_uj").write_text(f"{wrap}\n")
    return zone


class Clock:
    def __init__(self) -> None:
        self.t = itertools.count(0.0, 1.0)

    def __call__(self) -> float:
        return next(self.t)


def test_tokens_per_joule_is_one_computation_for_npu_and_host() -> None:
    assert energy.tokens_per_joule(900, 450.0) == 2.0
    assert energy.tokens_per_joule(900, None) is None
    assert energy.tokens_per_joule(900, 0.0) is None
    npu = TelemetryReport(source="npu-smi", interval_s=1.0, duration_s=2.0, samples=3,
                          failed_samples=0, last_error=None, energy_j=450.0)
    assert npu.tokens_per_joule(900) == energy.tokens_per_joule(900, 450.0)


def test_counter_delta_adds_the_range_on_a_wrap_and_nothing_on_a_reset() -> None:
    assert energy.counter_delta(100, 350, WRAP_UJ) == (250, False)
    assert energy.counter_delta(WRAP_UJ - 100, 50, WRAP_UJ) == (150, True)
    assert energy.counter_delta(1000, 10, None) == (0, True)


def test_rapl_sums_packages_not_subzones_and_handles_the_wrap(tmp_path: Path) -> None:
    root = tmp_path / "powercap"
    pkg0 = rapl_zone(root, "intel-rapl:0", WRAP_UJ - 2_000_000)
    pkg1 = rapl_zone(root, "intel-rapl:1", 5_000_000, "package-1")
    rapl_zone(root, "intel-rapl:0:0", 1, "core")  # inside package 0: not counted again
    (root / "intel-rapl:2").mkdir()  # no readable counter: skipped
    counters = energy.rapl_counters(root)
    assert [c.name for c in counters] == ["intel-rapl:0 (package-0)", "intel-rapl:1 (package-1)"]
    meter = energy.CounterMeter(counters, kind="rapl", source=str(root), clock=Clock())
    meter.sample_once()
    (pkg0 / "energy_uj").write_text("3000000\n")  # wrapped: 2 J to the top + 3 J
    (pkg1 / "energy_uj").write_text("9000000\n")  # 4 J
    meter.sample_once()
    (pkg0 / "energy_uj").write_text("4000000\n")  # 1 J
    meter.sample_once()
    report = meter.report()
    assert report.energy_j == pytest.approx(2 + 3 + 4 + 1)
    assert report.wraps == 1 and report.samples == 3 and report.duration_s == 2.0
    data = report.to_dict()
    assert data["kind"] == "host" and data["meter"] == "rapl"
    assert data["mean_power_w"] == pytest.approx(5.0)


def test_one_reading_is_no_energy_and_a_vanished_file_is_a_failed_sample(tmp_path: Path
                                                                         ) -> None:
    zone = rapl_zone(tmp_path, "intel-rapl:0", 10)
    meter = energy.CounterMeter(energy.rapl_counters(tmp_path), kind="rapl", source="x",
                                clock=Clock())
    meter.sample_once()
    assert meter.report().energy_j is None
    (zone / "energy_uj").unlink()
    meter.sample_once()
    report = meter.report()
    assert report.failed_samples == 1 and "energy_uj" in (report.last_error or "")


def test_hwmon_energy_inputs_are_counters_and_power_inputs_are_integrated(tmp_path: Path
                                                                         ) -> None:
    root = tmp_path / "hwmon"
    meter_dir = root / "hwmon0"
    meter_dir.mkdir(parents=True)
    (meter_dir / "name").write_text("power_meter\n")
    (meter_dir / "power1_input").write_text("200000000\n")  # 200 W in µW
    (meter_dir / "power1_average").write_text("190000000\n")  # same channel: not twice
    (meter_dir / "power1_label").write_text("system\n")
    temp = root / "hwmon1"
    temp.mkdir()
    (temp / "name").write_text("coretemp\n")
    (temp / "temp1_input").write_text("45000\n")  # not power
    energy_in, power_in = energy.hwmon_sensors(root)
    assert energy_in == []
    assert [label for label, _ in power_in] == ["hwmon0/power1_input (power_meter, system)"]
    probe = energy.host_meter(powercap=tmp_path / "none", hwmon=root, find_ipmitool=False)
    assert isinstance(probe.meter, energy.PowerMeter) and probe.meter.kind == "hwmon"
    meter = energy.PowerMeter(probe.meter._read, kind="hwmon", source="x", sensors=[],
                              clock=Clock())
    meter.sample_once()
    (meter_dir / "power1_input").write_text("300000000\n")
    meter.sample_once()
    assert meter.report().energy_j == pytest.approx(250.0)  # trapezoid over 1 s

    # With an energy input the device's counter is used, a drop being a reset.
    (meter_dir / "energy1_input").write_text("1000000\n")
    energy_in, _ = energy.hwmon_sensors(root)
    counter = energy.CounterMeter(energy_in, kind="hwmon", source=str(root), clock=Clock())
    counter.sample_once()
    (meter_dir / "energy1_input").write_text("6000000\n")
    counter.sample_once()
    (meter_dir / "energy1_input").write_text("500000\n")  # reset: counts nothing
    counter.sample_once()
    (meter_dir / "energy1_input").write_text("2500000\n")
    counter.sample_once()
    assert counter.report().energy_j == pytest.approx(5 + 2)
    probe = energy.host_meter(powercap=tmp_path / "none", hwmon=root, find_ipmitool=False)
    assert isinstance(probe.meter, energy.CounterMeter) and probe.meter.kind == "hwmon"


def test_rapl_comes_first_and_nothing_readable_says_not_measured(tmp_path: Path) -> None:
    rapl_zone(tmp_path / "powercap", "intel-rapl:0", 1)
    probe = energy.host_meter(powercap=tmp_path / "powercap", hwmon=tmp_path / "hwmon",
                              find_ipmitool=False)
    assert probe.meter is not None and probe.meter.kind == "rapl"
    none = energy.host_meter(powercap=tmp_path / "no-powercap", hwmon=tmp_path / "no-hwmon",
                             find_ipmitool=False)
    assert none.meter is None
    assert none.reason == (f"host energy not measured: no readable RAPL package counter under "
                           f"{tmp_path / 'no-powercap'}; no readable hwmon energy or power "
                           f"input under {tmp_path / 'no-hwmon'}; no ipmitool")


def test_ipmi_power_reading(tmp_path: Path) -> None:
    # The line as ipmitool's DCMI power reading prints it (lib/ipmi_dcmi.c).
    reading = ("\n    Instantaneous power reading:                   312 Watts\n"
               "    Minimum during sampling period:                 98 Watts\n")
    assert energy.parse_ipmi_power(reading) == 312.0
    with pytest.raises(energy.MeterError, match="no 'Instantaneous power reading'"):
        energy.parse_ipmi_power("Error: DCMI not supported\n")
    tool = tmp_path / "ipmitool"
    tool.write_text('#!/bin/sh\n[ "$*" = "dcmi power reading" ] || exit 3\n'
                    f"printf '%s' '{reading}'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    probe = energy.host_meter(powercap=tmp_path / "x", hwmon=tmp_path / "y",
                              ipmitool=str(tool))
    assert isinstance(probe.meter, energy.PowerMeter) and probe.meter.kind == "ipmi"
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\necho 'Could not open device' >&2\nexit 1\n")
    broken.chmod(broken.stat().st_mode | stat.S_IXUSR)
    probe = energy.host_meter(powercap=tmp_path / "x", hwmon=tmp_path / "y",
                              ipmitool=str(broken))
    assert probe.meter is None and "Could not open device" in probe.reason


def test_the_meter_thread_samples_at_both_ends(tmp_path: Path) -> None:
    rapl_zone(tmp_path, "intel-rapl:0", 0)
    meter = energy.CounterMeter(energy.rapl_counters(tmp_path), kind="rapl", source="x",
                                interval_s=60.0)
    with meter:
        pass
    assert meter.report().samples == 2  # start and stop, none in between (60 s interval)
    with pytest.raises(ValueError, match="interval"):
        energy.CounterMeter([], kind="rapl", source="x", interval_s=0)
