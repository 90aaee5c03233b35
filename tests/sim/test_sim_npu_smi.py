"""The simulated ``npu-smi``: table layouts and the query pages, against the vendor formats."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pytest

from ascend_sim import models
from ascend_sim.devtools import hw, npu_smi

# `npu-smi info` on an A2 (910B) node: the sample table of the project's Ascend reference.
REFERENCE_A2_SAMPLE = [
    "+------------------------------------------------------------------------------------------------+",
    "| npu-smi 24.1.rc2                 Version: 24.1.rc2                                             |",  # noqa: E501
    "+---------------------------+---------------+----------------------------------------------------+",
    "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|",  # noqa: E501
    "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",  # noqa: E501
    "+===========================+===============+====================================================+",
    "| 0     910B1               | OK            | 271.1       41                0    / 0             |",  # noqa: E501
    "| 0                         | 0000:C1:00.0  | 55          0    / 0          65099/ 65536         |",  # noqa: E501
    "+===========================+===============+====================================================+",
]

DRIVER = "24.1.rc2"
SPLIT = re.compile(r"[|/\s]+")  # how the vendor's own scripts split a table row


def fields(line: str) -> list[str]:
    return [f for f in SPLIT.split(line) if f]


def chip_rows(table: str) -> list[tuple[list[str], list[str]]]:
    """(name row, chip row) pairs of the device part of an ``npu-smi info`` table."""
    lines = table.splitlines()
    end = next(i for i, line in enumerate(lines) if "Process id" in line)
    rows = [line for line in lines[6:end] if line.startswith("| ")]
    return [(fields(rows[i]), fields(rows[i + 1])) for i in range(0, len(rows), 2)]


# --- rendering -------------------------------------------------------------------------------


def test_a2_info_matches_reference_sample() -> None:
    node = models.make_node("atlas800-a2", 1)
    chip = node.chips[0]
    chip.power_w, chip.temp_c, chip.aicore_pct = 271.1, 41, 55
    chip.hbm_used_mb, chip.hbm_total_mb = 65099, 65536
    chip.bus_id = "0000:C1:00.0"

    lines = npu_smi.render_info(asdict(node), DRIVER).splitlines()

    assert lines[:9] == REFERENCE_A2_SAMPLE


def test_a2_full_node_every_line_is_98_wide() -> None:
    node = models.make_node("atlas800-a2")
    table = npu_smi.render_info(asdict(node), DRIVER)

    lines = table.splitlines()
    assert [len(line) for line in lines] == [98] * len(lines)
    rows = chip_rows(table)
    assert [name[0] for name, _ in rows] == [str(n) for n in range(8)]
    assert {name[1] for name, _ in rows} == {"910B1"}
    assert [chip[1] for _, chip in rows] == [c.bus_id for c in node.chips]
    assert all(chip[-2:] == ["3340", "65536"] for _, chip in rows)
    assert sum("No running processes found in NPU" in line for line in lines) == 8


def test_a3_layout_shows_phy_ids_and_two_chips_per_npu() -> None:
    table = npu_smi.render_info(asdict(models.make_node("atlas800-a3")), DRIVER)
    lines = table.splitlines()

    assert lines[4].startswith("| Chip  Phy-ID              | Bus-Id")
    assert all(len(line) == 98 for line in lines)
    rows = chip_rows(table)
    assert len(rows) == 16
    assert [name[0] for name, _ in rows] == [str(n // 2) for n in range(16)]
    assert [chip[0] for _, chip in rows] == ["0", "1"] * 8  # chip within the NPU
    assert [chip[1] for _, chip in rows] == [str(n) for n in range(16)]  # Phy-ID 0..15
    assert {name[1] for name, _ in rows} == {"Ascend910"}
    # Power is reported once per card: a number on chip 0, "-" on chip 1.
    assert [name[3] for name, _ in rows[1::2]] == ["-"] * 8
    assert all(re.fullmatch(r"\d+\.\d", name[3]) for name, _ in rows[0::2])
    assert all(chip[-2:] == ["3340", "65536"] for _, chip in rows)


def test_310p_layout_has_device_column_and_no_hbm() -> None:
    table = npu_smi.render_info(asdict(models.make_node("atlas300i-duo")), DRIVER)
    lines = table.splitlines()

    # The real 310P frame (tests/data/corpus/npu-smi/310p3-duo-24.1.0.1-8chip): 106 wide.
    assert lines[4].startswith("| Chip    Device                | Bus-Id")
    assert "HBM" not in table
    assert all(len(line) == 106 for line in lines)
    rows = chip_rows(table)
    assert len(rows) == 2
    assert {name[1] for name, _ in rows} == {"310P3"}
    # AICore, Memory used / total: no third usage pair.
    assert [chip[3:] for _, chip in rows] == [["0", "1210", "44280"]] * 2


# --- the command ------------------------------------------------------------------------------

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def install_driver_files(sim_root: Path) -> Callable[[str], None]:
    def install(version: str) -> None:
        info = sim_root / "usr/local/Ascend/driver/version.info"
        info.parent.mkdir(parents=True, exist_ok=True)
        info.write_text(f"Version={version}\npackage_version={version}\n")

    return install


@pytest.fixture
def npu_smi_env(
    sim_root: Path,
    node_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    install_driver_files: Callable[[str], None],
) -> None:
    monkeypatch.setenv("ASCEND_SIM_ROOT", str(sim_root))
    monkeypatch.setenv("ASCEND_SIM_NODE", str(node_file))
    models.make_node("atlas800-a2").save(node_file)
    install_driver_files(DRIVER)


@pytest.fixture
def run(npu_smi_env: None, capsys: pytest.CaptureFixture[str]) -> Run:
    def call(*args: str) -> tuple[int, str, str]:
        rc = npu_smi.main(list(args))
        out, err = capsys.readouterr()
        return rc, out, err

    return call


def kv(text: str) -> dict[str, str]:
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def set_chips(node_file: Path, **values: object) -> None:
    node = models.Node.load(node_file)
    for chip in node.chips:
        for key, value in values.items():
            setattr(chip, key, value)
    node.save(node_file)


def test_root_path_prefixes_absolute_paths(sim_root: Path, npu_smi_env: None) -> None:
    assert hw.root_path("/etc/x") == f"{sim_root}/etc/x"
    assert hw.driver_version() == DRIVER


def test_info_renders_the_node(run: Run, node_file: Path) -> None:
    rc, out, _ = run("info")

    assert rc == 0
    assert out == npu_smi.render_info(asdict(models.Node.load(node_file)), DRIVER)
    assert out.splitlines()[1].startswith(f"| npu-smi {DRIVER} ")


def test_info_without_driver_fails(run: Run, sim_root: Path) -> None:
    (sim_root / "usr/local/Ascend/driver/version.info").unlink()

    rc, out, err = run("info")

    assert rc != 0
    assert out == ""
    assert "-8005" in err


@pytest.mark.parametrize("argv", [[], ["list"], ["info", "-x"], ["info", "-t", "board"]])
def test_bad_usage_fails(run: Run, argv: list[str]) -> None:
    rc, out, err = run(*argv)

    assert rc != 0
    assert out == ""
    assert "Usage" in err


@pytest.mark.parametrize(("model", "npus", "chips"), [("atlas800-a2", 8, 1), ("atlas800-a3", 3, 2)])
def test_info_list(run: Run, node_file: Path, model: str, npus: int, chips: int) -> None:
    models.make_node(model, npus).save(node_file)

    rc, out, _ = run("info", "-l")

    assert rc == 0
    assert re.findall(r"Total Count\s*: (\d+)", out) == [str(npus)]
    assert re.findall(r"NPU ID\s*: (\d+)", out) == [str(n) for n in range(npus)]
    assert re.findall(r"Chip Count\s*: (\d+)", out) == [str(chips)] * npus


def test_info_mapping_a3(run: Run, node_file: Path) -> None:
    models.make_node("atlas800-a3", 2).save(node_file)

    rc, out, _ = run("info", "-m")

    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NPU", "ID", "Chip", "ID", "Chip", "Logic", "ID", "Chip", "Name"]
    assert [line.split() for line in lines[1:]] == [
        ["0", "0", "0", "Ascend", "Ascend910"],
        ["0", "1", "1", "Ascend", "Ascend910"],
        ["0", "2", "-", "Mcu"],
        ["1", "0", "2", "Ascend", "Ascend910"],
        ["1", "1", "3", "Ascend", "Ascend910"],
        ["1", "2", "-", "Mcu"],
    ]


@pytest.mark.parametrize(
    ("hdk", "compatibility"),
    [(DRIVER, "OK"), ("23.0.0", "NOK"), ("", "NOK")],
)
def test_board_page(run: Run, node_file: Path, hdk: str, compatibility: str) -> None:
    set_chips(node_file, firmware_version="7.5.0.1.129", firmware_hdk=hdk)

    rc, out, _ = run("info", "-t", "board", "-i", "3")

    assert rc == 0
    page = kv(out)
    assert page["NPU ID"] == "3"
    assert page["Software Version"] == DRIVER
    assert page["Firmware Version"] == "7.5.0.1.129"
    assert page["Compatibility"] == compatibility
    assert page["Chip Count"] == "1"


def test_board_page_follows_installed_driver(
    run: Run, node_file: Path, install_driver_files: Callable[[str], None]
) -> None:
    set_chips(node_file, firmware_version="7.5.0.1.129", firmware_hdk=DRIVER)
    install_driver_files("25.0.rc1")

    page = kv(run("info", "-t", "board", "-i", "0")[1])

    assert page["Software Version"] == "25.0.rc1"
    assert page["Compatibility"] == "NOK"


def test_board_page_without_firmware(run: Run) -> None:
    page = kv(run("info", "-t", "board", "-i", "0")[1])

    assert page["Firmware Version"] == "NA"
    assert page["Compatibility"] == "NOK"


def test_board_page_of_a_chip(run: Run, node_file: Path) -> None:
    models.make_node("atlas800-a3", 2).save(node_file)

    rc, out, _ = run("info", "-t", "board", "-i", "1", "-c", "1")

    assert rc == 0
    page = kv(out)
    assert page["Chip ID"] == "1"
    assert page["Chip Name"] == "Ascend910"
    assert page["PCIe Bus Info"] == "0000:C2:01.0"


@pytest.mark.parametrize("state", ["Warning", "Alarm", "Critical", "UNKNOWN"])
def test_health_page_reports_unhealthy_chip(run: Run, node_file: Path, state: str) -> None:
    node = models.Node.load(node_file)
    node.chips[2].health = state
    node.save(node_file)

    sick = kv(run("info", "-t", "health", "-i", "2")[1])
    well = kv(run("info", "-t", "health", "-i", "1")[1])
    table = run("info")[1]

    assert sick["Health Status"] == state
    assert sick["Error Code"] != "NA"
    assert well == {"Health Status": "OK", "Error Code": "NA", "Error Information": "NA"}
    assert [name[2] for name, _ in chip_rows(table)] == ["OK", "OK", state] + ["OK"] * 5
    # The real board page has no faulty-chip count (910-23.0.5-info-t-board-doc).
    board = kv(run("info", "-t", "board", "-i", "2")[1])
    assert "Faulty Chip Count" not in board


def test_health_page_worst_chip_of_an_a3_card(run: Run, node_file: Path) -> None:
    node = models.make_node("atlas800-a3", 2)
    node.chips[3].health = "Alarm"  # NPU 1, chip 1
    node.save(node_file)

    assert kv(run("info", "-t", "health", "-i", "1")[1])["Health Status"] == "Alarm"
    assert kv(run("info", "-t", "health", "-i", "1", "-c", "0")[1])["Health Status"] == "OK"
    assert kv(run("info", "-t", "health", "-i", "0")[1])["Health Status"] == "OK"


@pytest.mark.parametrize(
    ("kind", "key", "value"),
    [
        ("usages", "HBM Usage Rate(%)", str(3340 * 100 // 65536)),
        ("power", "Power Dissipation(W)", "92.5"),
        ("temp", "Chip Temperature(C)", "38"),
        ("ecc", "HBM Double Bit Error Count", "0"),
    ],
)
def test_other_pages(run: Run, kind: str, key: str, value: str) -> None:
    rc, out, _ = run("info", "-t", kind, "-i", "0")

    assert rc == 0
    assert kv(out)[key] == value


@pytest.mark.parametrize(
    "argv",
    [
        ["-t", "board", "-i", "8"],
        ["-t", "health", "-i", "-1"],
        ["-t", "board", "-i", "x"],
        ["-t", "board", "-i", "0", "-c", "1"],
        ["-t", "nosuchpage", "-i", "0"],
    ],
)
def test_invalid_ids_and_types_fail(run: Run, argv: list[str]) -> None:
    rc, out, err = run("info", *argv)

    assert rc != 0
    assert out == ""
    assert err
