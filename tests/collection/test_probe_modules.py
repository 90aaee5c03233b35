"""The probe modules' parsers against the simulator's vendor output and install layouts."""

from __future__ import annotations

import importlib
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from ansible_run import module_result

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


# --- the facts modules as Ansible runs them ------------------------------------------------------

# (module, its arguments ({tmp}: this test's tmp_path), the facts it sets or, for a failure, the
# start of its message)
FACTS_RUNS = [
    ("cann_facts", {"install_path": "{tmp}/Ascend"},
     {"ascend_cann_state": {"driver_version": "", "toolkits": [], "nnal_version": "",
                            "environment": {}, "environment_error": "", "files": {}}}),
    ("cann_facts", {"install_path": "{tmp}"}, "cannot read the installed CANN: "),
    ("npu_driver_facts", {"install_path": "{tmp}/Ascend", "ledger_path": "{tmp}/ledger.fact"},
     {"ascend_npu_driver_state": {"driver_version": "", "firmware_versions": [],
                                  "firmware_unreadable_chips": 0, "upgrade_tool": False,
                                  "ledger": {}}}),
    ("npu_driver_facts", {"install_path": "{tmp}"}, "cannot read the installed driver: "),
    # The run user and group as the databases have them, and who holds the wanted ids.
    ("npu_driver_facts", {"install_path": "{tmp}/Ascend", "user": "root", "group": "root",
                          "uid": 0, "gid": 0},
     {"ascend_npu_driver_state": {
         "run_user": {"name": "root", "exists": True, "uid": 0, "gid": 0, "group": "root",
                      "home_exists": True},
         "run_group": {"name": "root", "exists": True, "gid": 0},
         "uid_owner": "root", "gid_owner": "root"}}),
    ("npu_driver_facts", {"install_path": "{tmp}/Ascend", "user": "ascend-no-such-user",
                          "group": "ascend-no-such-group", "uid": 4294967290, "gid": 4294967290},
     {"ascend_npu_driver_state": {
         "run_user": {"name": "ascend-no-such-user", "exists": False, "uid": None, "gid": None,
                      "group": "", "comment": "", "shell": "", "home": "",
                      "home_exists": False},
         "run_group": {"name": "ascend-no-such-group", "exists": False, "gid": None},
         "uid_owner": "", "gid_owner": ""}}),
    ("npu_pci_facts", {"sysfs_pci_path": "{tmp}/missing"}, {"ascend_pci_npus": []}),
    ("rdma_facts", {"sysfs_path": "{tmp}/missing"}, {"rdma_devices": []}),
    ("disk_space_facts", {"paths": ["{tmp}/not/yet"]},
     {"ascend_disk_space": {"{tmp}/not/yet": {"measured_at": "{tmp}"}}}),
    ("disk_space_facts", {"paths": ["relative"]}, "paths must be absolute: relative"),
    ("npu_smi_facts", {"npu_smi": "/bin/false"}, "/bin/false info failed with rc 1"),
    ("clock_sync_facts", {}, {"ascend_clock": {}}),
]


def _with_tmp(value: Any, tmp: str) -> Any:
    if isinstance(value, dict):
        return {_with_tmp(k, tmp): _with_tmp(v, tmp) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_tmp(v, tmp) for v in value]
    return value.replace("{tmp}", tmp) if isinstance(value, str) else value


def _contains(found: Any, expected: Any) -> bool:
    """Whether ``found`` holds ``expected`` (dicts: at least its keys, recursively)."""
    if isinstance(expected, dict):
        return isinstance(found, dict) and all(
            k in found and _contains(found[k], v) for k, v in expected.items())
    return bool(found == expected)


@pytest.mark.parametrize(("name", "args", "expected"), FACTS_RUNS,
                         ids=[f"{run[0]}-{i}" for i, run in enumerate(FACTS_RUNS)])
def test_facts_modules_run_as_ansible_runs_them(
    tmp_path: Path, name: str, args: dict[str, Any], expected: dict[str, Any] | str
) -> None:
    """Each facts module's main(): its facts, never a change, and its own failure messages."""
    _info(tmp_path / "driver/version.info", "Version 25.5.0\n")  # not key=value: unreadable
    result = module_result(name, _with_tmp(args, str(tmp_path)), tmp_path, check_mode=True)
    if isinstance(expected, str):
        assert result["failed"] is True
        assert result["msg"].startswith(expected), result["msg"]
    else:
        assert (result.get("failed"), result["changed"]) == (None, False), result
        assert _contains(result["ansible_facts"], _with_tmp(expected, str(tmp_path))), result


def test_npu_driver_facts_reads_no_account_it_is_not_asked_about(tmp_path: Path) -> None:
    result = module_result("npu_driver_facts", {"install_path": str(tmp_path / "Ascend")},
                           tmp_path, check_mode=True)
    state = result["ansible_facts"]["ascend_npu_driver_state"]
    assert not {"run_user", "run_group", "uid_owner", "gid_owner"} & set(state), state
