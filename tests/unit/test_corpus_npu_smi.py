"""The npu-smi reader and the simulated npu-smi against the corpus of REAL outputs.

``tests/data/corpus/npu-smi/``: each ``X.txt`` is verbatim tool output, ``X.expected.json`` what a
careful human reads from it (see the corpus README and SOURCES). The reader must read every
sample to its expected values; the simulator, fed a sample's values, must print that sample
byte for byte for every layout it imitates, and its own renderings must have the structure
(widths, header rows, rules, column separators) of the corpus family they imitate.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import paths
import pytest
from corpus import reading

from ansible_collections.ascend_serve.fleet.plugins.module_utils import npu_smi as reader
from ascend_serve.stack import npusmi
from ascend_sim import models
from ascend_sim.devtools import hw
from ascend_sim.devtools import npu_smi as sim

CORPUS = paths.CORPUS / "npu-smi"
SAMPLES = sorted(p.name.removesuffix(".expected.json") for p in CORPUS.glob("*.expected.json"))

Reader = Callable[[str], dict[str, Any]]
READERS: dict[str, Reader] = {
    "npu-smi info": reader.read_info,
    "npu-smi info -l": reader.read_list,
    "npu-smi info -m": reader.read_mapping,
    "npu-smi info -t board": reader.read_board,
    "npu-smi info -t health": reader.read_health,
}
# The family of every chip of a sample, by the sample's name (the reader's family rules).
FAMILY_BY_PREFIX = [("a2-", "910B"), ("26x-910b4", "910B"), ("a3-", "910C"), ("26x-a3", "910C"),
                    ("310p3-", "310P"), ("310-", "310"), ("910", "910")]


def text(name: str) -> str:
    return (CORPUS / f"{name}.txt").read_text(encoding="utf-8")


def expected(name: str) -> dict[str, Any]:
    return reading(CORPUS / f"{name}.txt")


def read(name: str) -> dict[str, Any]:
    command = expected(name)["command"]
    key = next(k for k in sorted(READERS, key=len, reverse=True) if command.startswith(k))
    return READERS[key](text(name))


def mismatches(want: Any, got: Any, path: str = "") -> list[str]:
    """Where ``got`` differs from ``want``, comparing the keys ``want`` has."""
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{path}: {got!r} is not a dict"]
        out: list[str] = []
        for key, value in want.items():
            if key not in got:
                out.append(f"{path}.{key}: missing")
            else:
                out += mismatches(value, got[key], f"{path}.{key}")
        return out
    if isinstance(want, list):
        if not isinstance(got, list) or len(want) != len(got):
            return [f"{path}: {len(want)} items expected, got {got!r}"]
        return [m for i, (w, g) in enumerate(zip(want, got, strict=True))
                for m in mismatches(w, g, f"{path}[{i}]")]
    if want != got or type(want) is bool or (want is None) != (got is None):
        return [f"{path}: {want!r} != {got!r}"] if want != got else []
    return []


# --- the reader -------------------------------------------------------------------------------


def test_the_corpus_is_there() -> None:
    assert len(SAMPLES) == 26
    assert all((CORPUS / f"{name}.txt").is_file() for name in SAMPLES)


@pytest.mark.parametrize("name", SAMPLES)
def test_reader_reads_every_sample_as_a_human_does(name: str) -> None:
    want = {k: v for k, v in expected(name).items() if k != "notes"}
    if want["command"] != "npu-smi info":
        # Pages: the command line and the hardware context are not in the text.
        want.pop("command")
        want.pop("layout")

    assert mismatches(want, read(name)) == []


@pytest.mark.parametrize("name", [n for n in SAMPLES if expected(n)["command"] == "npu-smi info"])
def test_family_of_every_chip(name: str) -> None:
    family = next(f for prefix, f in FAMILY_BY_PREFIX if name.startswith(prefix))

    assert {c["family"] for c in read(name)["chips"]} == {family}


@pytest.mark.parametrize(
    ("name", "family"),
    [("910B4", "910B"), ("910B2C", "910B"), ("910B3", "910B"), ("910A", "910"),
     ("910ProB", "910"), ("910B", "910"), ("310P3", "310P"), ("310", "310"),
     ("Ascend910", None), ("910C", None), ("Ascend950", None)],
)
def test_family_rules_without_phy_id(name: str, family: str | None) -> None:
    assert reader.chip_family(name, has_phy_id=False) == family


def test_a3_needs_the_phy_id_column() -> None:
    assert reader.chip_family("Ascend910", has_phy_id=True) == "910C"


@pytest.mark.parametrize("name", [n for n in SAMPLES if expected(n)["command"] == "npu-smi info"])
def test_typed_wrapper_agrees_with_the_reader(name: str) -> None:
    raw = read(name)
    chips = npusmi.parse_info(text(name))
    processes = npusmi.parse_processes(text(name))

    assert [(c.npu, c.chip, c.name, c.family, c.health, c.bus_id, c.hbm_used_mb, c.power_w)
            for c in chips] == [
        (c["npu"], c["chip"], c["name"], c["family"], c["health"], c["bus_id"], c["hbm_used_mb"],
         c["power_w"]) for c in raw["chips"]]
    assert [p.model_dump(exclude_none=True) for p in processes] == [
        {k: v for k, v in p.items() if v is not None} for p in raw["processes"]]
    assert npusmi.parse_version(text(name)) == raw["driver_version"]


def test_versions_are_kept_as_printed() -> None:
    versions = {n: read(n)["driver_version"] for n in SAMPLES
                if expected(n)["command"] == "npu-smi info"}

    assert versions["a2-910b2c-25.0.rc1.2-procs"] == "25.0.rc1.2"
    assert versions["910a-23.0.rc1.b070-warning-4card"] == "23.0.rc1.b070"
    assert reader.read_version(text("a3-24.1.rc3.3-16chip-procs")) == "24.1.rc3.3"
    # No hot-patch "sph" version is in the corpus; the reader keeps any version token as is.
    hot = text("a2-910b4-25.0.rc1.1-8card").replace("25.0.rc1.1 ", "25.0.rc1.2.sph001")
    assert reader.read_info(hot)["driver_version"] == "25.0.rc1.2.sph001"


def test_short_310p_header_and_missing_values() -> None:
    chips = reader.read_chips(text("310p3-23.0.rc3-short-header"))

    assert [c["power_w"] for c in chips] == [None, None]  # "NA"
    assert [c["hbm_total_mb"] for c in chips] == [None, None]  # no HBM column
    assert [c["device_id"] for c in chips] == [0, 1]


def test_list_card_count_is_read_like_total_count() -> None:
    # No sample shows "Card Count" (the corpus README lists it as not found); read it anyway.
    listing = reader.read_list(text("a2-910b4-info-l-8card").replace("Total Count", "Card Count"))

    assert (listing["total_count"], listing["card_count"]) == (None, 8)
    assert npusmi.parse_list(text("a2-910b4-info-l-8card")).total_count == 8


def _replace_line(name: str, index: int, old: str, new: str) -> str:
    lines = text(name).splitlines()
    assert old in lines[index]
    lines[index] = lines[index].replace(old, new)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("mangled", "message"),
    [
        # A name row with a field more than its header names.
        (_replace_line("a2-910b4-25.0.rc1.1-8card", 9, "910B4 ", "910B4 X"),
         "line 10: cannot read this row of the chip table"),
        # A chip row with a field less.
        (_replace_line("a3-25.0.rc1-16chip", 7, "0     0  ", "0        "),
         "line 8: chip row has 7 fields"),
        # A process row whose ids are not numbers.
        (_replace_line("a2-910b2c-25.0.rc1.2-procs", 15, "0       0 ", "x       0 "),
         "line 16: cannot read this row of the process table"),
        # A header with no Bus-Id: an unknown layout.
        (_replace_line("310p3-23.0.0-npu24", 4, "Bus-Id", "Bus   "),
         "line 5: header row has no bus_id column"),
        ("dcmi module initialize failed. ret is -8005\n", "line 1: no 'NPU Name | Health' header"),
    ],
)
def test_unknown_layout_names_the_line(mangled: str, message: str) -> None:
    with pytest.raises(reader.NpuSmiParseError, match=re.escape(message)) as caught:
        reader.read_info(mangled)
    # The message quotes the text it could not read.
    line_no = int(message.split(":")[0].split()[1])
    assert repr(mangled.splitlines()[line_no - 1].strip()) in str(caught.value)


def test_wrapper_error_is_the_readers() -> None:
    assert npusmi.NpuSmiParseError is reader.NpuSmiParseError
    with pytest.raises(npusmi.NpuSmiParseError, match="line 3: not 'key : value'"):
        npusmi.parse_list("\tTotal Count : 1\n\n\tgarbage\n")


# --- the simulator against the corpus -----------------------------------------------------------

# Samples the simulator prints byte for byte from their values; the others are layouts it does not
# imitate: the 93-column internal build 23.0.rc1.b070 and the ragged 310P3 frame of 23.0.rc3.
NOT_IMITATED = {"910a-23.0.rc1.b070-warning-4card", "310p3-23.0.rc3-short-header"}
INFO_SAMPLES = [n for n in SAMPLES
                if expected(n)["command"] == "npu-smi info" and n not in NOT_IMITATED]


def node_of(name: str) -> dict[str, Any]:
    """A simulated node description holding the values of a corpus ``info`` sample."""
    data = expected(name)
    family = data["chips"][0]["name"]
    chip_type = {"Ascend910": "910C", "910A": "910", "910ProB": "910",
                 "910B": "910"}.get(family, family)
    chips = [{
        "npu": c["npu"], "chip": c["chip"], "name": c["name"], "health": c["health"],
        "phy_id": c["phy_id"] if c["phy_id"] is not None else c.get("device_id", 0),
        "bus_id": c["bus_id"], "power_w": c["power_w"], "temp_c": c["temp_c"],
        "aicore_pct": c["aicore_pct"], "hbm_used_mb": c["hbm_used_mb"],
        "hbm_total_mb": c["hbm_total_mb"], "mem_used_mb": c["memory_used_mb"],
        "mem_total_mb": c["memory_total_mb"], "hugepages_used": c["hugepages_used"],
        "hugepages_total": c["hugepages_total"],
    } for c in data["chips"]]
    processes = [{"npu": p["npu"], "chip": p["chip"], "pid": p["pid"], "name": p["name"] or "",
                  "memory_mb": p["memory_mb"]} for p in data["processes"]]
    return {"chip_type": chip_type, "chips": chips, "npu_processes": processes}


@pytest.mark.parametrize("name", INFO_SAMPLES)
def test_simulator_prints_the_sample_from_its_values(name: str) -> None:
    real = text(name)
    printed = sim.render_info(node_of(name), expected(name)["driver_version"])

    if "Process id" not in real or not real.rstrip("\n").endswith("+"):
        # Pasted without the process table, or a doc snippet that stops mid-table: the sample is
        # the beginning of what the simulator prints.
        real_lines = real.splitlines()
        assert printed.splitlines()[:len(real_lines)] == real_lines
    else:
        assert printed == real


def _tabs(sample: str) -> str:
    """The blog pasted npu-smi's leading TAB as 8 spaces (corpus README); put the TAB back."""
    return re.sub(r"(?m)^ {8}", "\t", sample)


def test_simulator_list_page_is_the_sample() -> None:
    node = asdict(models.make_node("atlas800-a2-32g"))

    assert sim.render_list(node) == _tabs(text("a2-910b4-info-l-8card"))


@pytest.mark.parametrize(("model", "sample"), [("atlas800-a2-32g", "a2-910b4-info-m-8card"),
                                               ("atlas800-910", "910a-info-m-8card")])
def test_simulator_mapping_page_is_the_sample(model: str, sample: str) -> None:
    node = asdict(models.make_node(model))

    printed = sim.render_mapping(node)

    if sample.startswith("910a"):
        # The 910A fixture has no trailing spaces at all (its README note: "as stored"), where the
        # A2 paste pads "Chip Name" and "Mcu" to 30: compare without trailing blanks there.
        assert [line.rstrip() for line in printed.splitlines()] == text(sample).splitlines()
    else:
        assert printed == _tabs(text(sample))


def _page_lines(page: str) -> list[str]:
    """Key/value lines without their indentation (the doc samples dropped it)."""
    return [line.strip() for line in page.splitlines()]


def test_simulator_board_page_is_the_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hw, "driver_version", lambda: "23.0.5")
    node = models.make_node("atlas800-910", 1)
    node.chips[0].bus_id = "0000:61:00.0"
    node.chips[0].firmware_version, node.chips[0].firmware_hdk = "7.1.0.7.220", "23.0.5"

    page = sim.render_board(asdict(node), 0, None)

    assert _page_lines(page) == _page_lines(text("910-23.0.5-info-t-board-doc"))
    assert reader.read_board(page) == {k: v for k, v in read("910-23.0.5-info-t-board-doc").items()}


def test_simulator_chip_board_page_has_the_samples_keys_and_forms(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hw, "driver_version", lambda: "23.0.5")
    node = models.make_node("atlas800-910", 1)
    node.chips[0].bus_id = "0000:61:00.0"
    node.chips[0].firmware_version = "7.1.0.7.220"
    real = read("910-info-c-board-doc-redacted")

    page = reader.read_board(sim.render_board(asdict(node), 0, 0))

    assert list(page) == list(real)
    die = re.compile(r"^[0-9A-F]{8}( [0-9A-F]{8}){4}$")
    assert die.match(page["vdie_id"]) and die.match(page["ndie_id"])
    for key in ("npu", "chip", "chip_type", "chip_version", "board_id", "pcb_id", "bom_id",
                "chip_position_id", "pcie_bus_info", "firmware_version"):
        assert page[key] == real[key], key


def test_simulator_health_page_is_the_sample(sim_root: Path, node_file: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    node = asdict(models.make_node("atlas800-910", 1))

    page = sim.render_type(node, "health", 0, 0)

    assert _page_lines(page) == _page_lines(text("info-t-health-ok-doc"))


# The corpus sample each simulated layout imitates (model, driver version, sample).
FIDELITY = [
    ("atlas800-a2", "25.0.rc1.2", "a2-910b2c-25.0.rc1.2-procs"),
    ("atlas800-a2-32g", "24.1.0.3", "a2-910b4-24.1.rc3-procs-noname"),
    ("atlas800-910", "24.1.0", "910prob-24.1.0-8card"),
    ("atlas800-a3", "24.1.rc3.3", "a3-24.1.rc3.3-16chip-procs"),
    ("atlas800-a2-32g", "26.0.rc1", "26x-910b4-26.0.rc1-1card-doc"),
    ("atlas800-a3", "26.0.rc1", "26x-a3-26.0.rc1-fixture-procs"),
    ("atlas300i-duo", "24.1.0.1", "310p3-duo-24.1.0.1-8chip"),
]


def structure(table: str) -> dict[str, Any]:
    """What does not depend on the values: line widths, the header rows, the rule shapes, the
    column separators of every kind of row, and the process table's header."""
    lines = table.splitlines()
    kinds: dict[str, set[tuple[int, ...]]] = {}
    in_processes = False
    for line in lines[6:]:
        if line.startswith("+"):
            kind = "rule"
        elif "No running processes" in line:
            kind = "none"
        elif "Process id" in line:
            kind, in_processes = "process-header", True
        else:
            kind = "process" if in_processes else "chip"
        kinds.setdefault(kind, set()).add(
            tuple(i for i, ch in enumerate(line) if ch in "|+"))
    return {
        "widths": {len(line) for line in lines},
        "header": lines[2:6],
        "rules": {line for line in lines if line.startswith("+")},
        "process_header": [line for line in lines if "Process id" in line],
        "separators": kinds,
    }


@pytest.mark.parametrize(("model", "version", "sample"), FIDELITY)
def test_simulated_layout_has_the_structure_of_its_corpus_family(
        model: str, version: str, sample: str) -> None:
    node = models.make_node(model)
    node.npu_processes = [{"npu": 0, "chip": 0, "pid": 4242, "name": "VLLMWorker_TP",
                           "memory_mb": 31747}]
    real = structure(text(sample))

    mine = structure(sim.render_info(asdict(node), version))

    assert mine["widths"] == real["widths"]
    assert mine["header"] == real["header"]
    assert mine["process_header"] == real["process_header"]
    assert mine["rules"] <= real["rules"]
    width = max(real["widths"])
    for kind, separators in mine["separators"].items():
        if kind == "none":  # "| No running processes found in NPU n   |": one cell
            assert separators == {(0, width - 1)}
        elif kind == "process":  # a process row has the cells of the process header
            assert separators == real["separators"]["process-header"]
        else:
            assert separators <= real["separators"][kind], kind
    # The title row: "npu-smi <version>" padded to the same column before "Version:".
    assert (sim.render_info(asdict(node), version).splitlines()[1].index("Version:")
            - len(version)) == (text(sample).splitlines()[1].index("Version:")
                                - len(expected(sample)["driver_version"]))


def test_310p_node_prints_no_process_rows() -> None:
    # No 310P sample shows process rows: the simulator prints none rather than invent them.
    node = models.make_node("atlas300i-duo")
    node.npu_processes = [{"npu": 0, "chip": 0, "pid": 1, "name": "python3", "memory_mb": 1}]

    assert reader.read_info(sim.render_info(asdict(node), "24.1.0.1"))["processes"] == []
