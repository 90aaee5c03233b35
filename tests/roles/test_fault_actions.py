"""What the fleet does with a chip fault's class (issue #32), over stand-in local hosts whose
npu-smi is the simulator's (the roles run it at the path the inventory gives; they do not know the
simulator): counts only.

- The upgrade's circuit breaker: more than ``ascend_upgrade_max_faulted_hosts`` hosts of one batch
  refused for a blocking fault stop the rollout before any host is drained; as many as the limit
  do not (``playbooks/upgrade.yml``, check mode).
- Its preflight play runs ``npu-smi info`` once per host: the fault read sets the chip facts the
  serving profile's HBM fit then reuses, and reads each chip's health page once.
- A RestartBusiness-class fault restarts the vLLM unit once per fault, within the rate limit
  (``roles/vllm_service/tasks/faults.yml`` after preflight's fault read, as ``site.yml`` plays
  them; a fake ``systemctl`` on PATH counts the restarts; the ledgers in a scratch directory).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import yaml
from ansible_run import ansible_playbook, this_machine_preflight_vars
from paths import PLAYBOOKS
from routerproc import running_router

from ascend_serve.bench.openai_stub import StubServer
from ascend_serve.serving.router import WorkerHost

# Codes and their classes in the vendor's table (data/faults/vendor_codes.json); the first three
# are shown by real samples of tests/data/corpus/faults, 80E01801 is the simulator's one
# RestartBusiness-class code (ascend_sim VENDOR_TABLE_CHIP_CODES).
SEPARATE, RESTART_NPU, FREE_RESTART = "80E18402", "8C03A000", "8C084E00"
RESTART_BUSINESS = "80E01801"


def _sim_npu_smi(tmp_path: Path, host: str, faults: dict[tuple[int, int], list[str]]) -> Path:
    """The simulator's npu-smi for ``host`` (an Atlas 800 A2, 8 x 910B), logging each call."""
    from ascend_sim.__main__ import set_fault_codes
    from ascend_sim.models import make_node

    here = tmp_path / host
    root = here / "root"
    (root / "usr/local/Ascend/driver").mkdir(parents=True, exist_ok=True)
    (root / "usr/local/Ascend/driver/version.info").write_text("Version=25.5.0\n")
    node = make_node("atlas800-a2")
    for (npu, chip), codes in faults.items():
        set_fault_codes(node, npu, chip, codes)
    (here / "node.json").write_text(json.dumps(asdict(node)))
    tool = here / "npu-smi"
    tool.write_text(
        f"#!/bin/sh\necho \"$*\" >> '{here}/calls'\nASCEND_SIM_ROOT='{root}' "
        f"ASCEND_SIM_NODE='{here}/node.json' exec '{sys.executable}' -c 'import sys; "
        "from ascend_sim.devtools.npu_smi import main; sys.exit(main())' \"$@\"\n")
    tool.chmod(0o755)
    return tool


def _calls(tmp_path: Path, host: str) -> list[str]:
    path = tmp_path / host / "calls"
    return path.read_text().splitlines() if path.exists() else []


def _host_checks(tmp_path: Path) -> dict[str, Any]:
    """The preflight host checks set to what this machine is (x86_64, no NPU on its PCI bus)."""
    return this_machine_preflight_vars(tmp_path)


def _inventory(tmp_path: Path, hosts: dict[str, dict[str, Any]],
               group_vars: dict[str, Any]) -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"ascend_nodes": {
        "hosts": hosts, "vars": {**_host_checks(tmp_path), **group_vars}}}}}))
    return path


def _upgrade(tmp_path: Path, faulted: dict[str, str], limit: int,
             **group_vars: Any) -> subprocess.CompletedProcess[str]:
    """upgrade.yml --check with every host in one batch (serial is the play's: an extra var), the
    roles' tags left out (--tags preflight: the preflight play, and the breaker and drain steps
    the upgrade play tags always)."""
    hosts = {h: {"preflight_npu_smi": str(tool), "vllm_service_npu_smi": str(tool)}
             for h, code in faulted.items()
             for tool in [_sim_npu_smi(tmp_path, h, {(1, 0): [code]})]}
    inventory = _inventory(tmp_path, hosts, {"ascend_upgrade_max_faulted_hosts": limit,
                                             **group_vars})
    return ansible_playbook("--check", "-i", str(inventory), "--tags", "preflight",
                            "-e", json.dumps({"ascend_upgrade_batches": ["100%"]}),
                            str(PLAYBOOKS / "upgrade.yml"))


def _drained(proc: subprocess.CompletedProcess[str]) -> int:
    """How many times the play reached the drain step (its task header is printed once)."""
    return proc.stdout.count("TASK [Drain the hosts that change set]")


def test_the_circuit_breaker_stops_a_batch_with_more_faulted_hosts_than_allowed(
        tmp_path: Path) -> None:
    proc = _upgrade(tmp_path, {"node-a": SEPARATE, "node-b": RESTART_NPU}, 1)
    text = " ".join(proc.stdout.split())
    assert proc.returncode != 0, proc.stdout[-4000:]
    # One failed result, the breaker's (run once for the batch), naming both hosts.
    assert len(re.findall(r"fatal: \[[^\]]+\]: FAILED", text)) == 1, text[-3000:]
    assert ("Circuit breaker: 2 host(s) of this batch have a blocking chip fault (node-a, node-b)"
            in text)
    assert _drained(proc) == 0
    # Preflight refused (and did not fail) each faulted host: two refusals, no failed preflight.
    assert text.count("is refused (drained, not put into service)") == 2
    assert "Preflight failed on" not in text


def test_the_circuit_breaker_lets_a_batch_with_as_many_faulted_hosts_as_allowed_on(
        tmp_path: Path) -> None:
    # With a serving profile, whose HBM fit reads npu-smi too (playbooks/preflight.yml).
    proc = _upgrade(tmp_path, {"node-a": SEPARATE, "node-b": FREE_RESTART}, 2,
                    vllm_service_profile="deepseek-r1-distill-qwen-7b")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Circuit breaker" not in proc.stdout
    # Both hosts were left out of the batch (end_host), so none was drained.
    assert _drained(proc) == 0
    assert len(re.findall(r"ok=\d+ +changed=\d+ +unreachable=0 +failed=0", proc.stdout)) == 2
    # npu-smi info ran once per host in the preflight play: the fault read's chip facts gave the
    # profile's HBM fit too; each chip's health page was read once.
    for host in ("node-a", "node-b"):
        calls = _calls(tmp_path, host)
        assert calls.count("info") == 1, calls
        assert len([c for c in calls if c.startswith("info -t health -i ")]) == 8, calls
        assert len(calls) == 9, calls
    assert "HBM not known" not in proc.stdout
    assert "TASK [Check the serving profile against the version set]" in proc.stdout


FAKE_SYSTEMCTL = """#!/bin/sh
echo "$*" >> '{log}'
case "$1" in
  show) printf 'Id=%s\\nLoadState=loaded\\nActiveState=active\\nSubState=running\\n' "$2" ;;
esac
exit 0
"""
# Preflight's fault tasks as the preflight play runs them (ledgers in a scratch directory).
FAULTS_PLAY = """---
- name: Preflight's fault tasks, as site.yml plays them
  hosts: ascend_nodes
  gather_facts: false
  module_defaults:
    ascend_serve.fleet.ledger:
      facts_dir: {facts}
  tasks:
    - name: Read the ledgers
      ansible.builtin.setup:
        gather_subset: [min]
        fact_path: {facts}

    - name: Preflight's fault tasks
      ansible.builtin.include_role:
        name: ascend_serve.fleet.preflight
        tasks_from: faults
"""
# Then vllm_service's fault actions.
RESTART_PLAY = FAULTS_PLAY + """
    - name: The vllm_service role's fault actions
      ansible.builtin.include_role:
        name: ascend_serve.fleet.vllm_service
        tasks_from: faults
"""


def test_a_restart_business_fault_restarts_the_unit_once_within_the_rate_limit(
        tmp_path: Path) -> None:
    facts, bin_dir = tmp_path / "facts", tmp_path / "bin"
    facts.mkdir()
    bin_dir.mkdir()
    log = tmp_path / "systemctl.log"
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL.format(log=log))
    (bin_dir / "systemctl").chmod(0o755)
    (tmp_path / "play.yml").write_text(RESTART_PLAY.format(facts=facts))
    tool = _sim_npu_smi(tmp_path, "node-a", {(0, 0): [RESTART_BUSINESS]})
    inventory = _inventory(tmp_path, {"node-a": {"preflight_npu_smi": str(tool)}}, {
        "vllm_service_npu_smi": str(tool), "vllm_service_unit": "ascend-vllm",
        "vllm_service_fault_restart_limit": 1, "vllm_service_fault_restart_window_s": 3600})
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}

    def run() -> subprocess.CompletedProcess[str]:
        proc = ansible_playbook("-i", str(inventory), str(tmp_path / "play.yml"), env=env)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        return proc

    def restarts() -> int:
        return log.read_text().splitlines().count("restart ascend-vllm") if log.exists() else 0

    run()  # the fault is new: one restart
    assert restarts() == 1
    run()  # the same fault, already restarted for: none
    assert restarts() == 1
    # The fault cleared; another RestartBusiness fault on another chip within the window: over
    # the limit of one restart per hour, reported and not restarted.
    from ascend_sim.__main__ import set_fault_codes
    from ascend_sim.models import Node

    node = Node.load(tmp_path / "node-a" / "node.json")
    set_fault_codes(node, 0, 0, [])
    set_fault_codes(node, 1, 0, [RESTART_BUSINESS])
    node.save(tmp_path / "node-a" / "node.json")
    third = run()
    assert restarts() == 1
    text = " ".join(third.stdout.split())
    assert "RestartBusiness fault(s) 1/0/80E01801@" in text
    assert "not restarted for: already 1 restart(s) in 3600 s" in text
    record = json.loads((facts / "ascend_fault_restarts.fact").read_text())
    assert len(record["restarts"]) == 1
    assert [c.split("@")[0] for c in record["codes"]] == ["0/0/80E01801"]


def test_a_refused_host_is_drained_through_the_router(tmp_path: Path) -> None:
    """Preflight's fault tasks on a host with a SeparateNPU-class code, a real vllm-router in
    front of it and a healthy host (stub replicas): the refused host goes into the router's drain
    state (kept across a router restart) and out of the running router; the healthy one stays."""
    facts, state = tmp_path / "facts", tmp_path / "router-state"
    facts.mkdir()
    state.mkdir()
    (tmp_path / "play.yml").write_text(FAULTS_PLAY.format(facts=facts))
    with StubServer() as a, StubServer() as b:
        hosts = [WorkerHost("node-a", "127.0.0.1", (a.port,)),
                 WorkerHost("node-b", "127.0.0.1", (b.port,))]
        with running_router(tmp_path, hosts) as url:
            nodes = {name: {"preflight_npu_smi": str(_sim_npu_smi(tmp_path, name, faults)),
                            "router_worker_address": "127.0.0.1", "router_worker_ports": [port]}
                     for name, faults, port in (("node-a", {(2, 0): [SEPARATE]}, a.port),
                                                ("node-b", {}, b.port))}
            inventory = tmp_path / "hosts.yml"
            inventory.write_text(yaml.safe_dump({"all": {"children": {
                "ascend_nodes": {"hosts": nodes, "vars": _host_checks(tmp_path)},
                "vllm_routers": {"hosts": {"router-x": {
                    "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                    "router_port": int(url.rsplit(":", 1)[1]), "router_state_dir": str(state),
                    "router_drain_timeout": 5}}}}}}))
            proc = ansible_playbook("-i", str(inventory), str(tmp_path / "play.yml"))
            assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
            assert "node-a is refused (drained, not put into service)" in proc.stdout
            workers = httpx.get(f"{url}/list_workers", timeout=10, trust_env=False).json()
            assert workers["urls"] == [b.url]
    assert json.loads((state / "drained.json").read_text()) == ["node-a"]
    assert a.url not in (state / "workers.env").read_text()
    assert b.url in (state / "workers.env").read_text()
