"""NPU telemetry: sampling npu-smi while a load runs, energy, tokens per joule, imbalance."""

from __future__ import annotations

import itertools
import stat
import threading
from pathlib import Path

import pytest

from ascend_serve.bench import telemetry
from ascend_serve.bench.telemetry import Sample, TelemetrySampler, energy_joules, summarise
from ascend_serve.stack import npusmi

DATA = Path(__file__).parents[1] / "data" / "npu-smi"
# The sample table of the project's Ascend reference (section npu-smi), verbatim.
REFERENCE_A2_SAMPLE = (DATA / "a2.txt").read_text(encoding="utf-8")

# The header rows of the reference's A2 sample table.
HEADER = "".join(REFERENCE_A2_SAMPLE.splitlines(keepends=True)[:6])


def a2_table(chips: list[tuple[float, int, int, int]]) -> str:
    """An A2 ``npu-smi info`` table; per NPU (power W, temp C, AICore %, HBM used MB)."""
    rows = [HEADER]
    for npu, (power, temp, core, hbm) in enumerate(chips):
        rows.append(f"| {npu:<5} 910B1               | OK            | {power:<11} {temp:<17} "
                    "0    / 0             |\n")
        rows.append(f"| 0                         | 0000:C{npu}:00.0  | {core:<11} 0    / 0"
                    f"          {hbm:<5}/ 65536         |\n")
        rows.append("+===========================+===============+=============================="
                    "======================+\n")
    return "".join(rows)


def chips(text: str) -> list[npusmi.Chip]:
    return npusmi.parse_info(text)


def test_the_table_builder_reads_back_as_written() -> None:
    parsed = chips(a2_table([(200.0, 40, 50, 30000), (100.5, 41, 10, 20000)]))
    assert [(c.npu, c.power_w, c.temp_c, c.aicore_pct, c.hbm_used_mb) for c in parsed] == [
        (0, 200.0, 40.0, 50.0, 30000), (1, 100.5, 41.0, 10.0, 20000)]


def test_energy_is_the_trapezoid_of_the_summed_power() -> None:
    samples = [Sample(0.0, chips(a2_table([(100.0, 40, 0, 0), (100.0, 40, 0, 0)]))),
               Sample(2.0, chips(a2_table([(200.0, 40, 0, 0), (100.0, 40, 0, 0)]))),
               Sample(3.0, chips(a2_table([(200.0, 40, 0, 0), (200.0, 40, 0, 0)])))]
    # 2 s from 200 W to 300 W (500 J), then 1 s from 300 W to 400 W (350 J).
    assert energy_joules(samples) == pytest.approx(850.0)
    assert energy_joules(samples[:1]) is None


def test_a3_chips_without_power_add_nothing() -> None:
    a3 = chips((DATA / "a3.txt").read_text())
    powered = [c.power_w for c in a3 if c.power_w is not None]
    assert len(powered) < len(a3)  # the sample has '-' for chip 1 of each NPU
    samples = [Sample(0.0, a3), Sample(10.0, a3)]
    assert energy_joules(samples) == pytest.approx(10.0 * sum(powered))


def test_report_per_chip_figures_and_imbalance() -> None:
    samples = [Sample(0.0, chips(a2_table([(300.0, 50, 80, 60000), (150.0, 45, 20, 30000)]))),
               Sample(1.0, chips(a2_table([(310.0, 55, 90, 61000), (160.0, 44, 20, 30000)])))]
    report = summarise(samples, source="npu-smi", interval_s=1.0)
    assert report.samples == 2 and report.duration_s == pytest.approx(1.0)
    first, second = report.chips
    assert first.chip == "0/0" and first.power_w_mean == pytest.approx(305.0)
    assert first.power_w_max == 310.0 and first.temp_c_max == 55.0
    assert first.aicore_pct_mean == pytest.approx(85.0) and first.hbm_used_mb_max == 61000
    assert first.hbm_total_mb == 65536 and first.health == ["OK"]
    assert second.aicore_pct_mean == pytest.approx(20.0)
    imbalance = {i.metric: i for i in report.imbalance}
    # AICore means 85 and 20: (85 - 20) / 52.5 = 123.81 %.
    assert imbalance["aicore_pct"].spread_pct == pytest.approx(123.81, abs=0.01)
    assert (imbalance["aicore_pct"].busiest, imbalance["aicore_pct"].idlest) == ("0/0", "1/0")
    assert imbalance["hbm_used_mb"].busiest == "0/0"
    # Energy (450 W + 470 W) / 2 over 1 s; 920 generated tokens -> 2 tokens per joule.
    assert report.energy_j == pytest.approx(460.0)
    assert report.tokens_per_joule(920) == pytest.approx(2.0)
    as_dict = report.to_dict()
    assert as_dict["mean_power_w"] == pytest.approx(460.0)
    assert set(as_dict["imbalance"]) == {"aicore_pct", "hbm_used_mb"}


def test_one_chip_has_no_imbalance_and_no_power_means_no_tokens_per_joule() -> None:
    p310 = chips((DATA / "310p.txt").read_text())  # 310P prints NA for the power
    report = summarise([Sample(0.0, p310), Sample(5.0, p310)], source="x", interval_s=1.0)
    assert report.energy_j is None and report.tokens_per_joule(1000) is None
    single = summarise([Sample(0.0, chips(a2_table([(1.0, 1, 1, 1)])))], source="x",
                       interval_s=1.0)
    assert single.imbalance == [] and single.duration_s == 0.0


def test_sampler_samples_in_the_background_and_survives_bad_readings() -> None:
    tables = itertools.cycle([a2_table([(100.0, 40, 10, 1000)]), "garbage, not a table"])
    lock = threading.Lock()
    calls = 0

    def query() -> str:
        nonlocal calls
        with lock:
            calls += 1
            return next(tables)

    ticks = itertools.count()
    sampler = TelemetrySampler(query, source="fake", interval_s=0.01,
                               clock=lambda: float(next(ticks)))
    with sampler:
        while True:
            with lock:
                if calls >= 6:
                    break
            threading.Event().wait(0.01)
    report = sampler.report()
    assert report.samples >= 3 and report.failed_samples >= 2
    assert report.samples + report.failed_samples == calls
    assert report.last_error is not None
    with pytest.raises(ValueError, match="interval"):
        TelemetrySampler(query, source="fake", interval_s=0)


def test_sampler_for_runs_the_tool_and_is_none_without_one(tmp_path: Path) -> None:
    table = tmp_path / "table.txt"
    table.write_text(a2_table([(250.0, 40, 33, 12345), (240.0, 41, 31, 12000)]))
    tool = tmp_path / "npu-smi"
    tool.write_text(f'#!/bin/sh\n[ "$1" = info ] || exit 2\ncat {table}\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    sampler = telemetry.sampler_for(str(tool), interval_s=0.05)
    assert sampler is not None and sampler.source == str(tool)
    with sampler:
        threading.Event().wait(0.2)
    report = sampler.report()
    assert report.samples >= 2 and report.failed_samples == 0
    assert [c.chip for c in report.chips] == ["0/0", "1/0"]
    assert report.energy_j is not None and report.energy_j > 0
    assert telemetry.sampler_for(str(tmp_path / "absent")) is None
