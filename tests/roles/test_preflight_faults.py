"""Preflight refuses a host whose chip shows a fault of a blocking class (issue #32): the
simulator's npu-smi prints, in the corpus's `-t health` format, a code a real sample shows; the
refusal names the host, the chip, the code, its class and the fix. The role does not know the
simulator: it runs npu-smi at the path the inventory gives (playbooks/preflight.yml, check mode,
local connection)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import yaml
from ansible_run import ansible_playbook, this_machine_preflight_vars
from paths import PLAYBOOKS


def _sim_node(tmp_path: Path, codes: list[str]) -> Path:
    """The simulator's npu-smi on a 2-NPU Atlas 800 A2 whose NPU 1 chip 0 shows ``codes``."""
    from ascend_sim.__main__ import set_fault_codes
    from ascend_sim.models import make_node

    root = tmp_path / "root"
    (root / "usr/local/Ascend/driver").mkdir(parents=True)
    (root / "usr/local/Ascend/driver/version.info").write_text("Version=25.5.0\n")
    node = make_node("atlas800-a2", 2)
    set_fault_codes(node, 1, 0, codes)
    node_file = tmp_path / "node.json"
    node_file.write_text(json.dumps(asdict(node)))
    tool = tmp_path / "sim-npu-smi"
    tool.write_text(
        f"#!/bin/sh\nASCEND_SIM_ROOT='{root}' ASCEND_SIM_NODE='{node_file}' exec "
        f"'{sys.executable}' -c 'import sys; from ascend_sim.devtools.npu_smi import main; "
        "sys.exit(main())' \"$@\"\n")
    tool.chmod(0o755)
    return tool


def _preflight(tmp_path: Path, tool: Path) -> subprocess.CompletedProcess[str]:
    inventory = {"all": {"children": {"ascend_nodes": {"hosts": {"node-a": {}}}}, "vars": {
        **this_machine_preflight_vars(tmp_path),
        "preflight_npu_smi": str(tool),
    }}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    return ansible_playbook("--check", "-i", str(tmp_path / "hosts.yml"),
                            str(PLAYBOOKS / "preflight.yml"))


def test_a_separate_npu_fault_is_refused_with_its_code_and_fix(tmp_path: Path) -> None:
    proc = _preflight(tmp_path, _sim_node(tmp_path, ["80E18402"]))
    text = " ".join(proc.stdout.split())
    assert proc.returncode != 0, proc.stdout[-4000:]
    assert re.search(r"fatal: \[node-a\]: FAILED", proc.stdout)
    assert ("node-a is refused (drained, not put into service): chip 1/0: fault code 80E18402, "
            "class SeparateNPU (present since ") in text
    assert "fix: Drain the host (through the router where there is one)" in text
    # Nothing after preflight ran: the refusal stops the play before ascend_stack.
    assert "TASK [ascend_serve.fleet.ascend_stack" not in proc.stdout


def test_a_fault_of_a_class_that_does_not_block_passes(tmp_path: Path) -> None:
    # A4025021 is NotHandleFault in the vendor's table: recorded, not refused.
    proc = _preflight(tmp_path, _sim_node(tmp_path, ["A4025021"]))
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "is refused" not in proc.stdout
