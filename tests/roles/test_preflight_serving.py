"""The preflight play (playbooks/preflight.yml, check mode) over stand-in local hosts refuses,
before anything is installed, what used to fail only in serving.yml: a serving group whose size
is not the profile's number of nodes, and chips whose HBM (as npu-smi prints it) the profile does
not fit. The stand-in npu-smi prints a real sample of the corpus; the host checks of the preflight
role are set to what this machine is (x86_64, no NPUs on its PCI bus)."""

# The fit writes budgets as "32 GiB × 0.92": the multiplication sign is on purpose.
# ruff: noqa: RUF001, RUF003

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import ansible_playbook, this_machine_preflight_vars
from paths import CORPUS, PLAYBOOKS

# 8 x 910B4, "HBM-Usage(MB)" 2654 / 32768 on every chip (npu-smi 25.0.rc1.1, corpus SOURCES).
NPU_SMI_910B4 = CORPUS / "npu-smi" / "a2-910b4-25.0.rc1.1-8card.txt"
# 8 x 910B3, 65536 MB per chip (npu-smi 24.1.rc1).
NPU_SMI_910B3 = CORPUS / "npu-smi" / "a2-910b3-24.1.rc1-procs-java.txt"


def _npu_smi(tmp_path: Path, sample: Path | None) -> str:
    """A stand-in npu-smi printing ``sample`` for ``info``; a path that does not exist for None
    (a host before the driver is installed)."""
    tool = tmp_path / "npu-smi"
    if sample is not None:
        tool.write_text(f"#!/bin/sh\n[ \"$1\" = info ] && [ $# -eq 1 ] && exec cat '{sample}'\n"
                        "exit 2\n")
        tool.chmod(0o755)
    return str(tool)


def _preflight(tmp_path: Path, groups: dict[str, list[str]], profile: str,
               sample: Path | None, host_vars: dict[str, dict[str, Any]] | None = None,
               ) -> subprocess.CompletedProcess[str]:
    """playbooks/preflight.yml --check over the hosts of ``groups`` (each group its hosts'
    vllm_service_nodes_group), all serving ``profile`` unless ``host_vars`` say otherwise."""
    hosts = {h: (host_vars or {}).get(h, {}) for members in groups.values() for h in members}
    children: dict[str, Any] = {
        name: {"hosts": {h: {} for h in members},
               "vars": {"vllm_service_nodes_group": name}}
        for name, members in groups.items()}
    inventory = {"all": {"children": {"ascend_nodes": {"hosts": hosts, "children": children}},
                         "vars": {
        **this_machine_preflight_vars(tmp_path),
        "vllm_service_profile": profile, "vllm_service_npu_smi": _npu_smi(tmp_path, sample),
    }}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    return ansible_playbook("--check", "-i", str(tmp_path / "hosts.yml"),
                            str(PLAYBOOKS / "preflight.yml"))


def _text(proc: subprocess.CompletedProcess[str]) -> str:
    return " ".join(proc.stdout.split())


def _failed_hosts(proc: subprocess.CompletedProcess[str]) -> set[str]:
    return {m for m in re.findall(r"fatal: \[([^\]]+)\]: FAILED", proc.stdout)}


TWO_BY_TWO = {"serving_a": ["node-a1", "node-a2"], "serving_b": ["node-b1", "node-b2"]}


def test_four_hosts_in_two_groups_of_two_pass(tmp_path: Path) -> None:
    proc = _preflight(tmp_path, TWO_BY_TWO, "deepseek-r1-w8a8-2xa2", NPU_SMI_910B3)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert re.search(r"node-b2 +: ok=\d+ +changed=\d+ +unreachable=0 +failed=0", proc.stdout)
    # The fit was estimated, against the chips' own 64 GiB (65536 MB), not a constant.
    assert "TASK [ascend_serve.fleet.vllm_service : The profile must fit the chips]" in proc.stdout
    assert "HBM not known" not in proc.stdout


def test_groups_of_three_and_one_are_refused_naming_group_size_and_profile(
        tmp_path: Path) -> None:
    groups = {"serving_a": ["node-a1", "node-a2", "node-a3"], "serving_b": ["node-b1"]}
    proc = _preflight(tmp_path, groups, "deepseek-r1-w8a8-2xa2", NPU_SMI_910B3)
    assert proc.returncode != 0
    text = _text(proc)
    assert ("vllm_service on node-a1: profile deepseek-r1-w8a8-2xa2 runs on 2 nodes, but group "
            "serving_a has 3 host(s) (node-a1, node-a2, node-a3)") in text
    assert ("vllm_service on node-b1: profile deepseek-r1-w8a8-2xa2 runs on 2 nodes, but group "
            "serving_b has 1 host(s) (node-b1)") in text
    assert ("Fix: put exactly 2 hosts serving deepseek-r1-w8a8-2xa2 in group serving_b, or split "
            "the hosts into groups of 2 and set vllm_service_nodes_group") in text
    assert _failed_hosts(proc) == {"node-a1", "node-a2", "node-a3", "node-b1"}
    # Refused in the preflight play, so no later play ran (check mode changes nothing anyway).
    assert "PLAY [Accelerator stack]" not in proc.stdout


def test_a_group_whose_hosts_serve_different_profiles_is_refused(tmp_path: Path) -> None:
    proc = _preflight(tmp_path, TWO_BY_TWO, "deepseek-r1-w8a8-2xa2", NPU_SMI_910B3,
                      {"node-b2": {"vllm_service_profile": "deepseek-v3.2-w8a8-2xa2"}})
    assert proc.returncode != 0
    assert ("vllm_service on node-b1: profile deepseek-r1-w8a8-2xa2 runs on 2 nodes, but group "
            "serving_b has 2 host(s) (node-b1, node-b2); node-b2 serve another profile") in (
        _text(proc))
    assert _failed_hosts(proc) == {"node-b1", "node-b2"}


def test_32_gib_chips_are_refused_for_a_profile_that_needs_64_with_numbers(
        tmp_path: Path) -> None:
    proc = _preflight(tmp_path, TWO_BY_TWO, "deepseek-r1-w8a8-2xa2", NPU_SMI_910B4)
    assert proc.returncode != 0
    text = _text(proc)
    assert ("vllm_service on node-a1: profile deepseek-r1-w8a8-2xa2 does not fit: weights 43.30 "
            "GiB per chip + 3.00 GiB overhead exceed the 29.44 GiB budget (32 GiB × 0.92; HBM "
            "per chip from npu-smi on node-a1)") in text
    assert "Nothing was changed." in text
    assert _failed_hosts(proc) == set(TWO_BY_TWO["serving_a"] + TWO_BY_TWO["serving_b"])


def test_the_same_32_gib_node_passes_a_profile_that_fits(tmp_path: Path) -> None:
    proc = _preflight(tmp_path, {"single": ["node-a"]}, "deepseek-r1-distill-qwen-7b",
                      NPU_SMI_910B4)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "HBM not known" not in proc.stdout


def test_a_host_without_the_driver_is_estimated_nominally_and_says_so(tmp_path: Path) -> None:
    # No npu-smi yet (a fresh host): the fit uses the profile chip's nominal 64 GiB, passes, and
    # the run says the check is repeated once the driver is in.
    proc = _preflight(tmp_path, TWO_BY_TWO, "deepseek-r1-w8a8-2xa2", None)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert ("node-a1: HBM not known before the driver is installed (no npu-smi at "
            f"{tmp_path / 'npu-smi'}): profile deepseek-r1-w8a8-2xa2 was estimated against the "
            "nominal 64.0 GiB of a 910B chip") in _text(proc)


def _sim_npu_smi(tmp_path: Path, model: str) -> Path:
    """The simulator's npu-smi for a node of server ``model`` with its driver installed: the node
    description chooses the chips (atlas800-a2-32g: 8 x 910B4, 32768 MB as the corpus shows)."""
    from ascend_sim.models import make_node

    root = tmp_path / "root"
    (root / "usr/local/Ascend/driver").mkdir(parents=True)
    (root / "usr/local/Ascend/driver/version.info").write_text("Version=25.5.0\n")
    node_file = tmp_path / "node.json"
    node_file.write_text(json.dumps(asdict(make_node(model))))
    tool = tmp_path / "sim-npu-smi"
    tool.write_text(
        f"#!/bin/sh\nASCEND_SIM_ROOT='{root}' ASCEND_SIM_NODE='{node_file}' exec "
        f"'{sys.executable}' -c 'import sys; from ascend_sim.devtools.npu_smi import main; "
        "sys.exit(main())' \"$@\"\n")
    tool.chmod(0o755)
    return tool


@pytest.mark.parametrize(("model", "fits"), [("atlas800-a2-32g", False), ("atlas800-a2", True)])
def test_a_simulated_node_is_judged_by_its_own_chips(tmp_path: Path, model: str,
                                                     fits: bool) -> None:
    tool = _sim_npu_smi(tmp_path, model)
    proc = _preflight(tmp_path, {"replica": ["node-a", "node-b"]}, "deepseek-r1-w8a8-2xa2",
                      None, {h: {"vllm_service_npu_smi": str(tool)} for h in ("node-a", "node-b")})
    assert (proc.returncode == 0) is fits, proc.stdout[-4000:]
    refusal = ("profile deepseek-r1-w8a8-2xa2 does not fit: weights 43.30 GiB per chip + 3.00 GiB "
               "overhead exceed the 29.44 GiB budget (32 GiB × 0.92; HBM per chip from npu-smi on "
               "node-a)")
    assert (refusal in _text(proc)) is not fits
    assert "HBM not known" not in proc.stdout


def test_after_the_driver_serving_env_refuses_before_staging_the_model(tmp_path: Path) -> None:
    # Preflight on a fresh host had no npu-smi (nominal HBM); once the stack play installed the
    # driver, the serving_env play reads the chips' HBM first and refuses before model_store.
    inventory = {"ascend_nodes": {"hosts": {"node-a": {}, "node-b": {}}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "vllm_service_profile": "deepseek-r1-w8a8-2xa2", "model_store_name": "deepseek-r1",
        "vllm_service_npu_smi": _npu_smi(tmp_path, NPU_SMI_910B4)}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    proc = ansible_playbook("--check", "-i", str(tmp_path / "hosts.yml"), "--tags", "models",
                            str(PLAYBOOKS / "serving_env.yml"))
    assert proc.returncode != 0
    assert ("vllm_service on node-a: profile deepseek-r1-w8a8-2xa2 does not fit: weights 43.30 "
            "GiB per chip") in _text(proc)
    assert "TASK [ascend_serve.fleet.model_store" not in proc.stdout
