"""``npu-smi`` output: the parser (every table layout) and ``ascend-serve npu parse|status``.

The samples under ``tests/data/npu-smi/`` are written by hand after the vendor's layouts (the
A2 one is the reference's sample verbatim); the simulator's renderings are parsed as well, and
checked against the simulated node, so that parser and simulator are tested against each other
and neither against itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ascend_serve.cli import npu as npu_cli
from ascend_serve.cli.npu import npu_app
from ascend_serve.stack.npusmi import (
    Chip,
    NpuSmiParseError,
    parse_info,
    parse_list,
    parse_processes,
    parse_version,
    unhealthy,
)
from ascend_sim import models
from ascend_sim.devtools import npu_smi as sim_npu_smi

DATA = Path(__file__).parents[1] / "data" / "npu-smi"
runner = CliRunner()
CAT = shutil.which("cat")  # the fake npu-smi scripts run with PATH pointing elsewhere

# The sample table of the project's Ascend reference (section npu-smi), verbatim.
REFERENCE_A2_SAMPLE = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 24.1.rc2                 Version: 24.1.rc2                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B1               | OK            | 271.1       41                0    / 0             |
| 0                         | 0000:C1:00.0  | 55          0    / 0          65099/ 65536         |
+===========================+===============+====================================================+
"""

JSON_FIELDS = {"npu", "chip", "name", "health", "power_w", "temp_c", "aicore_pct",
               "hbm_used_mb", "hbm_total_mb", "bus_id"}


def sample(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def summary(chip: Chip) -> tuple[object, ...]:
    return (chip.npu, chip.chip, chip.phy_id, chip.name, chip.health, chip.power_w, chip.temp_c,
            chip.aicore_pct, chip.hbm_used_mb, chip.hbm_total_mb, chip.bus_id)


# --- the hand-written samples, one per layout ---------------------------------------------------


def test_a2_sample_is_the_reference_table() -> None:
    assert sample("a2.txt") == REFERENCE_A2_SAMPLE


def test_a2_reference_sample_field_by_field() -> None:
    [chip] = parse_info(REFERENCE_A2_SAMPLE)

    assert chip.npu == 0
    assert chip.chip == 0
    assert chip.phy_id is None
    assert chip.device_id is None
    assert chip.name == "910B1"
    assert chip.health == "OK"
    assert chip.power_w == 271.1
    assert chip.temp_c == 41
    assert chip.aicore_pct == 55
    assert (chip.hbm_used_mb, chip.hbm_total_mb) == (65099, 65536)
    assert (chip.memory_used_mb, chip.memory_total_mb) == (0, 0)
    assert (chip.hugepages_used, chip.hugepages_total) == (0, 0)
    assert chip.bus_id == "0000:C1:00.0"
    assert chip.extra == {}
    assert parse_version(REFERENCE_A2_SAMPLE) == "24.1.rc2"
    assert unhealthy([chip]) == []


def test_json_field_names() -> None:
    [chip] = parse_info(REFERENCE_A2_SAMPLE)

    dumped = json.loads(chip.model_dump_json())

    assert set(dumped) >= JSON_FIELDS
    assert {k: dumped[k] for k in JSON_FIELDS} == {
        "npu": 0, "chip": 0, "name": "910B1", "health": "OK", "power_w": 271.1, "temp_c": 41.0,
        "aicore_pct": 55.0, "hbm_used_mb": 65099, "hbm_total_mb": 65536, "bus_id": "0000:C1:00.0",
    }


A3_EXPECTED = [
    # npu, chip, phy_id, name, health, power, temp, aicore, hbm used, hbm total, bus id
    (0, 0, 0, "Ascend910", "OK", 178.5, 36, 12, 58012, 65536, "0000:9D:00.0"),
    (0, 1, 1, "Ascend910", "OK", None, 36, 11, 57980, 65536, "0000:9F:00.0"),
    (1, 0, 2, "Ascend910", "OK", 186.3, 37, 14, 58010, 65536, "0000:99:00.0"),
    (1, 1, 3, "Ascend910", "OK", None, 37, 13, 57994, 65536, "0000:9B:00.0"),
    (2, 0, 4, "Ascend910", "OK", 181.0, 35, 9, 58021, 65536, "0000:95:00.0"),
    (2, 1, 5, "Ascend910", "OK", None, 35, 10, 57976, 65536, "0000:97:00.0"),
    (3, 0, 6, "Ascend910", "OK", 179.9, 36, 15, 58008, 65536, "0000:91:00.0"),
    (3, 1, 7, "Ascend910", "OK", None, 36, 12, 57990, 65536, "0000:93:00.0"),
    (4, 0, 8, "Ascend910", "OK", 183.2, 38, 11, 58015, 65536, "0000:8D:00.0"),
    (4, 1, 9, "Ascend910", "OK", None, 38, 11, 57988, 65536, "0000:8F:00.0"),
    (5, 0, 10, "Ascend910", "OK", 177.6, 37, 10, 58003, 65536, "0000:89:00.0"),
    (5, 1, 11, "Ascend910", "OK", None, 37, 9, 57979, 65536, "0000:8B:00.0"),
    (6, 0, 12, "Ascend910", "OK", 184.4, 39, 13, 58019, 65536, "0000:85:00.0"),
    (6, 1, 13, "Ascend910", "OK", None, 39, 12, 57992, 65536, "0000:87:00.0"),
    (7, 0, 14, "Ascend910", "OK", 180.7, 36, 16, 58011, 65536, "0000:81:00.0"),
    (7, 1, 15, "Ascend910", "OK", None, 35, 14, 57985, 65536, "0000:83:00.0"),
]


def test_a3_sixteen_chips_two_per_npu() -> None:
    text = sample("a3.txt")
    chips = parse_info(text)

    assert len(chips) == 16
    assert [c.phy_id for c in chips] == list(range(16))
    assert [summary(c) for c in chips] == A3_EXPECTED
    assert all(c.device_id is None and c.memory_total_mb == 0 for c in chips)
    assert parse_version(text) == "24.1.rc3"
    assert parse_processes(text) == []  # "No running processes found in NPU n" only


def test_310p_has_device_column_and_no_hbm() -> None:
    text = sample("310p.txt")
    chips = parse_info(text)

    assert [(c.npu, c.chip, c.device_id) for c in chips] == [(1, 0, 0), (1, 1, 1), (2, 0, 2),
                                                             (2, 1, 3)]
    assert all(c.hbm_used_mb is None and c.hbm_total_mb is None for c in chips)
    assert all(c.phy_id is None and c.power_w is None for c in chips)  # power "NA"
    assert {c.name for c in chips} == {"310P3"}
    assert [c.temp_c for c in chips] == [59, 58, 61, 60]
    assert [c.aicore_pct for c in chips] == [0, 3, 27, 25]
    assert [(c.memory_used_mb, c.memory_total_mb) for c in chips] == [
        (1397, 44280), (1520, 43693), (20931, 44280), (20877, 43693)]
    # Both dies of an Atlas 300I Duo card sit behind one PCI function.
    assert [c.bus_id for c in chips] == ["0000:01:00.0"] * 2 + ["0000:81:00.0"] * 2
    assert [(p.npu, p.chip, p.pid, p.name, p.memory_mb) for p in parse_processes(text)] == [
        (2, 0, 104233, "python3", 19510), (2, 1, 104233, "python3", 19455)]


def test_driver_26x_wide_columns() -> None:
    text = sample("a2-26x-wide.txt")
    chips = parse_info(text)

    assert parse_version(text) == "26.0.rc2"
    assert len(chips) == 8
    assert summary(chips[0]) == (0, 0, None, "910B3", "OK", 162.6, 34, 37, 31877, 65536,
                                 "0000:C1:00.0")
    assert [c.power_w for c in chips] == [162.6, 165.0, 98.7, 99.2, 101.5, 97.3, 96.8, 100.1]
    assert [c.hbm_used_mb for c in chips[1:]] == [3380, 3381, 3379, 3382, 3380, 3378, 3383]
    assert [c.bus_id for c in chips] == [
        "0000:C1:00.0", "0000:C2:00.0", "0000:81:00.0", "0000:82:00.0",
        "0000:01:00.0", "0000:02:00.0", "0000:41:00.0", "0000:42:00.0"]
    [process] = parse_processes(text)
    assert process.model_dump() == {"npu": 0, "chip": 0, "pid": 632268, "name": "python3.11",
                                    "memory_mb": 28497, "container_pid": None}


def test_unhealthy_chips_and_missing_values() -> None:
    chips = parse_info(sample("a2-alarm.txt"))

    bad = unhealthy(chips)

    assert [(c.npu, c.health) for c in bad] == [(3, "Warning"), (5, "Alarm")]
    assert [c.ok for c in chips] == [True, True, True, False, True, False, True, True]
    warning, alarm = bad
    assert (warning.power_w, warning.temp_c, warning.hbm_used_mb) == (90.1, 67, 2851)
    # "NA" is no value, not a parse error.
    assert (alarm.power_w, alarm.temp_c, alarm.aicore_pct) == (None, None, None)
    assert (alarm.hbm_used_mb, alarm.hbm_total_mb, alarm.bus_id) == (None, 32768, "0000:02:00.0")
    assert parse_processes(sample("a2-alarm.txt")) == []  # table cut before the process part


def test_process_table_below_the_chips() -> None:
    text = sample("a2-processes.txt")

    chips = parse_info(text)
    processes = parse_processes(text)

    assert [(c.npu, c.name, c.aicore_pct, c.hbm_used_mb) for c in chips] == [
        (0, "910B2", 0, 3382), (1, "910B2", 64, 61422), (2, "910B2", 61, 61418),
        (3, "910B2", 66, 61425)]
    assert [(p.npu, p.chip, p.pid, p.name, p.memory_mb) for p in processes] == [
        (1, 0, 2975, "python3", 58042), (2, 0, 2976, "python3", 58036),
        (3, 0, 2977, "python3", 58043), (3, 0, 3110, "VLLM::EngineCor", 120)]


# --- reading by header, not by offsets ---------------------------------------------------------


def test_columns_are_found_by_header_not_offset() -> None:
    # Every run of spaces collapsed: no column is where it was, the fields still are.
    squeezed = re.sub(r" {2,}", " ", sample("a3.txt"))

    assert [summary(c) for c in parse_info(squeezed)] == A3_EXPECTED


def test_unknown_header_word_is_kept_as_extra() -> None:
    lines = REFERENCE_A2_SAMPLE.splitlines()
    lines[3] = lines[3].replace("Health        |", "Health  ECC   |")
    lines[6] = lines[6].replace("OK            |", "OK      0     |")

    [chip] = parse_info("\n".join(lines))

    assert chip.extra == {"ECC": "0"}
    assert (chip.health, chip.power_w) == ("OK", 271.1)


def test_bus_id_is_upper_cased() -> None:
    [chip] = parse_info(REFERENCE_A2_SAMPLE.replace("0000:C1:00.0", "0000:c1:00.0"))

    assert chip.bus_id == "0000:C1:00.0"


def _a2_lines() -> list[str]:
    return REFERENCE_A2_SAMPLE.splitlines()


def _without(index: int) -> str:
    lines = _a2_lines()
    del lines[index]
    return "\n".join(lines)


def _replace(index: int, old: str, new: str) -> str:
    lines = _a2_lines()
    lines[index] = lines[index].replace(old, new)
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no 'NPU Name | Health' header"),
        ("dcmi module initialize failed. ret is -8005\n", "ret is -8005"),
        (_without(4), "line 5: expected the second header row"),  # second header missing
        (_without(7), "line 8: no chip row below the name row on line 7"),
        ("\n".join(_a2_lines()[:7]), "ends without a chip row below the name row on line 7"),
        (_replace(7, "65099/ 65536", "65099       "), "line 8: chip row has 6 fields"),
        (_replace(6, "271.1", "abc  "), "line 7: power_w is 'abc', not a number"),
        (_replace(6, "41  ", "hot "), "line 7: temp_c is 'hot'"),
        (_replace(6, "| 0     910B1", "| x     910B1"), "line 7: npu is 'x'"),
        (_replace(6, "910B1 ", "      "), "line 7: cannot read this row of the chip table"),
        (_replace(4, "Bus-Id", "Bus   "), "line 5: header row has no bus_id column"),
    ],
)
def test_mangled_table_raises(text: str, message: str) -> None:
    with pytest.raises(NpuSmiParseError, match=re.escape(message)):
        parse_info(text)


def test_parse_error_is_a_value_error() -> None:
    assert issubclass(NpuSmiParseError, ValueError)


def test_mangled_process_row_raises() -> None:
    text = sample("a2-processes.txt").replace("| 2976          |", "| pid?          |")

    with pytest.raises(NpuSmiParseError, match="pid is 'pid"):
        parse_processes(text)


@pytest.mark.parametrize(
    ("text", "version"),
    [
        (REFERENCE_A2_SAMPLE, "24.1.rc2"),
        ("npu-smi version: 25.0.rc1.1\n", "25.0.rc1.1"),
        ("| npu-smi 23.0.6                   Version: 23.0.6 |", "23.0.6"),
        ("Usage: npu-smi info\n", None),
        ("", None),
    ],
)
def test_parse_version(text: str, version: str | None) -> None:
    assert parse_version(text) == version


# --- npu-smi info -l ---------------------------------------------------------------------------


def test_parse_list_a2() -> None:
    listing = parse_list(sample("list-a2.txt"))

    assert listing.total_count == 8
    assert [(n.npu, n.chip_count) for n in listing.npus] == [(i, 1) for i in range(8)]
    assert listing.npus[3].fields["Serial Number"] == "102408000003"


def test_parse_list_a3() -> None:
    listing = parse_list(sample("list-a3.txt"))

    assert [(n.npu, n.chip_count) for n in listing.npus] == [(i, 2) for i in range(8)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no 'Total Count'"),
        ("\tTotal Count : 2\n\n\tNPU ID : 0\n\tChip Count : 1\n", "Total Count is 2 but 1"),
        ("\tTotal Count : 1\n\tChip Count : 1\n", "line 2: 'Chip Count' before the first"),
        ("\tTotal Count : 1\n\tNPU ID : 0\n\tChip Count : two\n", "line 3: Chip Count is 'two'"),
        ("garbage\n", "line 1: not 'key : value'"),
    ],
)
def test_parse_list_mangled(text: str, message: str) -> None:
    with pytest.raises(NpuSmiParseError, match=re.escape(message)):
        parse_list(text)


# --- every layout the simulator renders --------------------------------------------------------


@pytest.mark.parametrize("model", sorted(models.SERVER_MODELS))
def test_simulator_tables_parse_to_the_simulated_node(model: str) -> None:
    node = models.make_node(model)
    node.chips[-1].health = "Alarm"
    text = sim_npu_smi.render_info(asdict(node), "24.1.rc2")

    chips = parse_info(text)

    layout = node.spec.layout
    assert len(chips) == len(node.chips)
    assert [c.bus_id for c in chips] == [c.bus_id for c in node.chips]
    assert [(c.npu, c.chip, c.name, c.health) for c in chips] == [
        (c.npu, c.chip, c.name, c.health) for c in node.chips]
    assert [c.power_w for c in chips] == [c.power_w for c in node.chips]
    assert [(c.temp_c, c.aicore_pct) for c in chips] == [
        (c.temp_c, c.aicore_pct) for c in node.chips]
    assert [c.phy_id for c in chips] == [
        c.phy_id if layout == "a3" else None for c in node.chips]
    # 310P's Device column numbers the chips of the host (310p3-duo-24.1.0.1-8chip).
    assert [c.device_id for c in chips] == [
        c.phy_id if layout == "310p" else None for c in node.chips]
    assert [(c.memory_used_mb, c.memory_total_mb) for c in chips] == [
        (c.mem_used_mb, c.mem_total_mb) for c in node.chips]
    if layout == "310p":
        assert all(c.hbm_used_mb is None and c.hbm_total_mb is None for c in chips)
    else:
        assert [(c.hbm_used_mb, c.hbm_total_mb) for c in chips] == [
            (c.hbm_used_mb, c.hbm_total_mb) for c in node.chips]
    assert unhealthy(chips) == [chips[-1]]
    assert parse_version(text) == "24.1.rc2"
    assert parse_processes(text) == []
    listing = parse_list(sim_npu_smi.render_list(asdict(node)))
    assert listing.total_count == node.npu_count
    assert sum(n.chip_count or 0 for n in listing.npus) == len(node.chips)


def test_simulated_a3_with_three_cards() -> None:
    node = models.make_node("atlas800-a3", 3)

    chips = parse_info(sim_npu_smi.render_info(asdict(node), "25.0.rc1"))

    assert [(c.npu, c.chip, c.phy_id) for c in chips] == [
        (n // 2, n % 2, n) for n in range(6)]
    assert [c.power_w is None for c in chips] == [False, True] * 3


def test_simulated_node_without_cards_has_no_chips() -> None:
    node = models.make_node("atlas800-a2", 0)

    assert parse_info(sim_npu_smi.render_info(asdict(node), "24.1.rc2")) == []


# --- ascend-serve npu parse ----------------------------------------------------------------------


def test_cli_parse_table() -> None:
    result = runner.invoke(npu_app, ["parse", str(DATA / "a2.txt")])

    assert result.exit_code == 0, result.output
    assert "910B1" in result.stdout
    assert "0000:C1:00.0" in result.stdout
    assert "65099 / 65536" in result.stdout
    assert "npu-smi 24.1.rc2" in result.stdout
    assert "all OK" in result.stdout


def test_cli_parse_json() -> None:
    result = runner.invoke(npu_app, ["parse", "--json", str(DATA / "a3.txt")])

    assert result.exit_code == 0, result.output
    chips = json.loads(result.stdout)
    assert len(chips) == 16
    assert all(set(c) >= JSON_FIELDS for c in chips)
    assert [c["phy_id"] for c in chips] == list(range(16))
    assert chips[1]["power_w"] is None


def test_cli_parse_310p_shows_device_and_memory_columns() -> None:
    result = runner.invoke(npu_app, ["parse", str(DATA / "310p.txt")])

    assert result.exit_code == 0, result.output
    assert "Device" in result.stdout
    assert "HBM" not in result.stdout
    assert "20931 / 44280" in result.stdout


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_cli_parse_unhealthy_exit_1(extra: list[str]) -> None:
    result = runner.invoke(npu_app, ["parse", *extra, str(DATA / "a2-alarm.txt")])

    assert result.exit_code == 1
    assert "Alarm" in result.stdout
    if extra:
        assert [c["health"] for c in json.loads(result.stdout)].count("OK") == 6
    else:
        assert "2 not OK" in result.stdout


def test_cli_parse_stdin() -> None:
    result = runner.invoke(npu_app, ["parse", "--json", "-"], input=sample("a2-26x-wide.txt"))

    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)) == 8


def test_cli_parse_table_without_chips_exit_1() -> None:
    empty = sim_npu_smi.render_info(asdict(models.make_node("atlas800-a2", 0)), "24.1.rc2")

    result = runner.invoke(npu_app, ["parse", "-"], input=empty)

    assert result.exit_code == 1
    assert "no chips" in result.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read"), ("ret is -8005\n", "no 'NPU Name | Health' header"),
     ("\n".join(_a2_lines()[:7]), "ends without a chip row")],
)
def test_cli_parse_bad_input_exit_2(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "info.txt"
    if content is not None:
        path.write_text(content)

    result = runner.invoke(npu_app, ["parse", str(path)])

    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stdout == ""


def test_cli_without_arguments_shows_help() -> None:
    result = runner.invoke(npu_app, [])

    assert "parse" in result.output
    assert "status" in result.output


# --- ascend-serve npu status ---------------------------------------------------------------------


def fake_npu_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, on_path: bool = True
) -> Path:
    """An ``npu-smi`` shell script (first on PATH if ``on_path``); it wants just ``info``."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    script = bindir / "npu-smi"
    script.write_text(f'#!/bin/sh\n[ "$1" = info ] && [ $# -eq 1 ] || exit 9\n{body}\n')
    script.chmod(0o755)
    if on_path:
        monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    return script


def test_status_runs_npu_smi_from_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = fake_npu_smi(tmp_path, monkeypatch, f"{CAT} '{DATA / 'a3.txt'}'")

    result = runner.invoke(npu_app, ["status"])

    assert result.exit_code == 0, result.output
    assert str(script) in result.stdout
    assert "0000:83:00.0" in result.stdout
    assert "16 chip(s), all OK" in " ".join(result.stdout.split())  # the title may wrap


def test_status_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_npu_smi(tmp_path, monkeypatch, f"{CAT} '{DATA / 'a2-alarm.txt'}'")

    result = runner.invoke(npu_app, ["status", "--json"])

    assert result.exit_code == 1
    chips = json.loads(result.stdout)
    assert [c["npu"] for c in chips if c["health"] != "OK"] == [3, 5]


def test_status_explicit_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = fake_npu_smi(tmp_path, monkeypatch, f"{CAT} '{DATA / 'a2.txt'}'", on_path=False)
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))

    result = runner.invoke(npu_app, ["status", "--json", "--npu-smi", str(script)])

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["bus_id"] == "0000:C1:00.0"


def test_status_default_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = fake_npu_smi(tmp_path, monkeypatch, f"{CAT} '{DATA / 'a2.txt'}'", on_path=False)
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    monkeypatch.setattr(npu_cli, "DEFAULT_NPU_SMI", str(script))

    result = runner.invoke(npu_app, ["status", "--json"])

    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)) == 1


@pytest.mark.parametrize("option", [[], ["--npu-smi", "/nonexistent/npu-smi"]])
def test_status_without_npu_smi_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: list[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(npu_cli, "DEFAULT_NPU_SMI", str(tmp_path / "npu-smi"))

    result = runner.invoke(npu_app, ["status", *option])

    assert result.exit_code == 2
    assert "npu-smi" in result.stderr


@pytest.mark.parametrize(
    ("script", "exit_code", "message"),
    [
        ("echo 'dcmi module initialize failed. ret is -8005' >&2; exit 1", 3, "ret is -8005"),
        ("echo 'something else entirely'", 2, "cannot read the output"),
    ],
    ids=["npu-smi-fails-exit-3", "unreadable-output-exit-2"],
)
def test_status_npu_smi_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str,
                               exit_code: int, message: str) -> None:
    fake_npu_smi(tmp_path, monkeypatch, script)

    result = runner.invoke(npu_app, ["status"])

    assert result.exit_code == exit_code
    assert message in result.stderr


def test_status_against_the_simulated_npu_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sim_root: Path, node_file: Path
) -> None:
    """The simulator's own ``npu-smi`` program, run as a subprocess, read back."""
    node = models.make_node("atlas800-a3", 4)
    node.chips[5].health = "Critical"
    node.save(node_file)
    info = sim_root / "usr/local/Ascend/driver/version.info"
    info.parent.mkdir(parents=True)
    info.write_text("Version=25.0.rc1\n")
    monkeypatch.setenv("ASCEND_SIM_ROOT", str(sim_root))
    monkeypatch.setenv("ASCEND_SIM_NODE", str(node_file))
    script = tmp_path / "npu-smi"
    script.write_text(f"#!{sys.executable}\nimport sys\n"
                      "from ascend_sim.devtools import npu_smi\nsys.exit(npu_smi.main())\n")
    script.chmod(0o755)

    result = runner.invoke(npu_app, ["status", "--json", "--npu-smi", str(script)])

    assert result.exit_code == 1, result.output
    chips = json.loads(result.stdout)
    assert [c["bus_id"] for c in chips] == [c.bus_id for c in node.chips]
    assert [c["phy_id"] for c in chips] == list(range(8))
    assert [c["npu"] for c in chips if c["health"] != "OK"] == [2]


def test_status_watch_until_ctrl_c(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # First sample healthy, then a chip raises an alarm: the exit code is the last sample's.
    count = tmp_path / "count"
    fake_npu_smi(tmp_path, monkeypatch, (
        f"if [ -e '{count}' ]; then {CAT} '{DATA / 'a2-alarm.txt'}'; "
        f"else : > '{count}'; {CAT} '{DATA / 'a2.txt'}'; fi"))
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(npu_cli, "_pause", sleep)

    result = runner.invoke(npu_app, ["status", "--watch", "2.5"])

    assert result.exit_code == 1, result.output
    assert sleeps == [2.5, 2.5]
    assert "2 not OK" in " ".join(result.stdout.split())
    assert "every 2.5 s" in result.stdout


def test_status_watch_keeps_going_when_npu_smi_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_npu_smi(tmp_path, monkeypatch, "echo 'ret is -8005' >&2; exit 1")

    def sleep(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(npu_cli, "_pause", sleep)

    result = runner.invoke(npu_app, ["status", "--watch", "1"])
    assert result.exit_code == 3
    assert "ret is -8005" in result.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["status", "--watch", "1", "--json"], "does not go with --watch"),
     (["status", "--watch", "0"], "0.1")],
)
def test_status_bad_options_exit_2(argv: list[str], message: str) -> None:
    result = runner.invoke(npu_app, argv)

    assert result.exit_code == 2
    assert message in result.stderr
