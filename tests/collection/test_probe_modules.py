"""The probe modules' parsers against the simulator's vendor output and install layouts."""

from __future__ import annotations

import importlib
from dataclasses import asdict
from pathlib import Path

import pytest

from ascend_sim.devtools import npu_smi
from ascend_sim.models import make_node

MODULES = "ansible_collections.ascend_serve.fleet.plugins.modules"
npu_smi_facts = importlib.import_module(f"{MODULES}.npu_smi_facts")
cann_facts = importlib.import_module(f"{MODULES}.cann_facts")


@pytest.mark.parametrize(
    ("model", "chips", "name"),
    [("atlas800-a2", 8, "910B1"), ("atlas800-a3", 16, "Ascend910"), ("atlas300i-duo", 2, "310P3")],
)
def test_npu_smi_info_parser_reads_every_layout(model: str, chips: int, name: str) -> None:
    node = make_node(model)
    node.chips[-1].health = "Critical"
    parsed = npu_smi_facts.parse_info(npu_smi.render_info(asdict(node), "25.5.0"))
    assert parsed["version"] == "25.5.0"
    assert len(parsed["chips"]) == chips
    assert {c["name"] for c in parsed["chips"]} == {name}
    assert [c["health"] for c in parsed["chips"]].count("Critical") == 1
    last = parsed["chips"][-1]
    assert {k: last[k] for k in ("npu", "name", "health")} == {
        "npu": node.chips[-1].npu, "name": name, "health": "Critical"}
    assert last["bus_id"] == node.chips[-1].bus_id


def test_npu_smi_board_page_parser() -> None:
    page = (
        "\tNPU ID                         : 3\n"
        "\tFirmware Version               : 7.8.0.2.212\n"
        "\tCompatibility                  : NOK\n"
    )
    assert npu_smi_facts.parse_kv(page) == {
        "NPU ID": "3", "Firmware Version": "7.8.0.2.212", "Compatibility": "NOK",
    }


def _info(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


CORPUS = Path(__file__).parents[1] / "data/corpus/versions"


def _sample(name: str) -> str:
    return (CORPUS / f"{name}.txt").read_text()


def test_cann_facts_finds_both_toolkit_layouts(tmp_path: Path) -> None:
    """Files in the layouts of real installs (tests/data/corpus/versions)."""
    base = tmp_path / "Ascend"
    _info(base / "ascend-toolkit/8.3.RC2/aarch64-linux/ascend_toolkit_install.info",
          _sample("toolkit-install-info-8.3.RC2-aarch64"))
    (base / "ascend-toolkit/latest").symlink_to("8.3.RC2")
    _info(base / "cann-8.5.0/aarch64-linux/ascend_toolkit_install.info",
          _sample("toolkit-install-info-8.3.RC2-aarch64").replace("8.3.RC2", "8.5.0"))
    _info(base / "cann-8.5.0/opp/version.info", _sample("opp-version-8.5.0.2.220-pypto-doc"))
    _info(base / "nnal/atb/8.2.RC1/version.info", _sample("nnal-atb-8.2.RC1.B150"))
    (base / "nnal/atb/latest").symlink_to("8.2.RC1")
    _info(base / "driver/version.info", _sample("driver-25.0.rc1.1"))
    state = cann_facts.cann_state(str(base))
    # The "latest" link is not followed, so each toolkit is found once.
    assert state["toolkits"] == [
        {"version": "8.3.RC2", "root": str(base / "ascend-toolkit/8.3.RC2"), "kernels_version": ""},
        {"version": "8.5.0", "root": str(base / "cann-8.5.0"), "kernels_version": "8.5.0"},
    ]
    assert state["nnal_version"] == "8.2.RC1"
    assert state["driver_version"] == "25.0.rc1.1"
    assert cann_facts.cann_state(str(tmp_path / "missing")) == {
        "driver_version": "", "toolkits": [], "nnal_version": ""}
