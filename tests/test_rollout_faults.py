"""A rolling upgrade over three simulated Atlas 800 A2 nodes reached by real SSH (host keys
checked), with faults in the middle of a batch: ``playbooks/upgrade.yml`` through ``ascend-serve
deploy``, and ``ascend-serve fleet status`` as the operator reads the result.

The nodes (``ascend_sim.sshfleet``: a derived image with sshd and os_base's Debian packages
pre-installed) first get the older set vllm-ascend-0.11.0 (HDK 25.3.rc1, CANN 8.3.RC2) with
``playbooks/stack.yml``; then ``upgrade.yml`` moves them to vllm-ascend-0.13.0 with the default
batches (one canary, then 20% at a time: here one host per batch) and a stand-in load balancer
(``tests/data/lb-hook.sh``) that plants each case's fault right after it took a host out:

1. a chip of the second host turns Critical while that host is drained: the batch fails naming
   host and chip, the rollout stops; the canary stays upgraded, resumed and ``done``; the second
   host stays drained on the old set; the third is never touched (old set, still in the balancer);
2. the third host's sshd goes away (sessions cut) after its drain: the run names it unreachable
   and stops; the second host (chip healthy again) was upgraded and resumed before it;
3. with sshd back, a re-run repairs: every host on the new set, resumed, ``done``; the hosts
   finished before change nothing.

The serving environment and the vLLM server are skipped (tags env, models, serve), as in molecule
``stack_upgrade``: three real vLLM servers on this 2-core CI machine would cost about ten minutes.
The vLLM side of a failed batch (validate failing after a restart) is molecule ``serving``'s case.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ascend_sim.sshfleet import Fleet, build_image, fleet_of, sim_env, write_inventory

ROOT = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).parent / "ascend-serve")
NODES = ("ascend-roll-1", "ascend-roll-2", "ascend-roll-3")
OLD, OLD_FIRMWARE = "vllm-ascend-0.11.0", "7.7.0.1.200"
NEW, NEW_FIRMWARE = "vllm-ascend-0.13.0", "7.8.0.2.212"
SKIP = "env,models,serve"
ROLLOUT_FACT = "/etc/ansible/facts.d/ascend_rollout.fact"


def _sim(*args: str, state_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ascend_sim", *args], check=True, text=True,
                          capture_output=True, env=sim_env(state_dir), cwd=ROOT, timeout=300)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[Fleet, Path]]:
    """Three SSH nodes and their inventory; installers of both sets with merged pins."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed")
    artifacts, mirror = tmp_path / "artifacts", tmp_path / "mirror"
    pins: dict[str, dict[str, str]] = {}
    for stack_set, firmware in ((OLD, OLD_FIRMWARE), (NEW, NEW_FIRMWARE)):
        pins_file = tmp_path / f"pins-{stack_set}.yml"
        _sim("packages", str(artifacts), "--set", stack_set, "--firmware", firmware,
             "--vars-file", str(pins_file))
        for key, sums in yaml.safe_load(pins_file.read_text()).items():
            pins.setdefault(key, {}).update(sums)
    subprocess.run([sys.executable, "-m", "ascend_sim.mirror", "apt", str(mirror / "apt")],
                   check=True, capture_output=True, env=sim_env(), cwd=ROOT, timeout=300)
    build_image(mirror)

    hook_log = tmp_path / "lb.log"
    (tmp_path / "lb.log.d").mkdir()
    hook = [str(ROOT / "tests/data/lb-hook.sh"), str(hook_log)]
    settings = yaml.safe_load((ROOT / "inventories/local/group_vars/ascend_nodes/main.yml")
                              .read_text())
    settings.update(npu_driver_artifact_dir=str(artifacts), cann_artifact_dir=str(artifacts),
                    rollout_drain_command=[*hook, "drain"],
                    rollout_resume_command=[*hook, "resume"])
    for serving in ("python_env_find_links", "python_env_ca_bundle", "model_store_source"):
        settings.pop(serving)
    with fleet_of(NODES, mirror, tmp_path / "sim") as nodes:
        inventory = _write_inventory(nodes, settings, pins)
        yield nodes, inventory


def _write_inventory(nodes: Fleet, settings: dict[str, Any],
                     pins: dict[str, dict[str, str]]) -> Path:
    return write_inventory(nodes, {"main.yml": "---\n" + yaml.safe_dump(settings),
                                   "artifacts.yml": "---\n" + yaml.safe_dump(pins)})


def _env(nodes: Fleet) -> dict[str, str]:
    # The fleet's own SSH control folder: its teardown ends the master connections, so none
    # outlives the nodes (podman may give a later container the same address).
    return {**os.environ, "PY_COLORS": "0", "ANSIBLE_SSH_CONTROL_PATH_DIR": str(nodes.control_dir)}


def _deploy(nodes: Fleet, inventory: Path, run_dir: Path, playbook: str, stack_set: str,
            firmware: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [CLI, "deploy", playbook, "-i", str(inventory), "--skip-tags", SKIP, "--run-dir",
         str(run_dir), "-e", f"ascend_stack_set={stack_set}",
         "-e", f"npu_driver_firmware_version={firmware}", "--json"],
        capture_output=True, text=True, timeout=1800, check=False, cwd=ROOT, env=_env(nodes))
    assert done.stdout.strip(), done.stderr
    return done.returncode, json.loads(done.stdout)


def _status(nodes: Fleet, inventory: Path,
            run_dir: Path) -> tuple[int, dict[str, dict[str, Any]], list[str]]:
    done = subprocess.run([CLI, "fleet", "status", "-i", str(inventory), "--run-dir",
                           str(run_dir), "--json"],
                          capture_output=True, text=True, timeout=600, check=False, cwd=ROOT,
                          env=_env(nodes))
    assert done.stdout.strip(), done.stderr
    report = json.loads(done.stdout)
    return done.returncode, {h["host"]: h for h in report["hosts"]}, report["fleet_problems"]


def _plant(tmp_path: Path, action: str, host: str, script: str) -> None:
    fault = tmp_path / "lb.log.d" / f"{action}-{host}"
    fault.write_text("#!/bin/sh\nset -eu\n" + script)
    fault.chmod(0o755)


def _hook_calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "lb.log").read_text().splitlines()


@pytest.mark.molecule
def test_rollout_stops_at_the_failed_batch_and_a_rerun_repairs(
        fleet: tuple[Fleet, Path], tmp_path: Path) -> None:
    nodes, inventory = fleet
    one, two, three = NODES

    # The fleet as it serves today: the older set on every host, all at once.
    rc, summary = _deploy(nodes, inventory, tmp_path / "install", "playbooks/stack.yml", OLD,
                          OLD_FIRMWARE)
    assert rc == 0, summary["failures"]

    # 1. A chip of the second host goes Critical once that host is out of the balancer.
    sim = f"PYTHONPATH={ROOT / 'molecule'} {sys.executable} -m ascend_sim"
    _plant(tmp_path, "drain", two, f"{sim} health {nodes.node_dir(two)} 3 Critical\n")
    rc, summary = _deploy(nodes, inventory, tmp_path / "upgrade-1", "upgrade", NEW, NEW_FIRMWARE)
    assert rc == 1, summary
    (failure,) = summary["failures"]
    assert failure["host"] == two and failure["kind"] == "failed", failure
    assert failure["role"] == "npu_driver", failure
    assert f"npu_driver on {two}: upgrade refused, 1 NPU" in failure["message"], failure
    assert "3 Critical" in failure["message"], failure
    assert _hook_calls(tmp_path) == [f"drain {one}", f"resume {one}", f"drain {two}"]

    rc, hosts, problems = _status(nodes, inventory, tmp_path / "status-1")
    assert rc == 1
    assert (hosts[one]["stack_set"], hosts[one]["rollout_phase"]) == (NEW, "done")
    assert hosts[one]["problems"] == []
    assert (hosts[two]["stack_set"], hosts[two]["rollout_phase"]) == (OLD, "upgrading")
    assert hosts[two]["problems"] == [
        f"left upgrading by an unfinished upgrade to {NEW} (out of the load balancer): re-run "
        "playbooks/upgrade.yml"]
    assert (hosts[three]["stack_set"], hosts[three]["rollout_phase"]) == (OLD, None)
    assert hosts[three]["problems"] == []
    assert any(OLD in p and NEW in p for p in problems), problems

    # 2. The chip is healthy again; the third host's sshd goes away in the middle of its batch.
    _sim("health", str(nodes.node_dir(two)), "3", "OK")
    _plant(tmp_path, "drain", three,
           f"podman exec {three} systemctl stop ssh.service\n"
           f"podman exec {three} pkill -KILL -f 'sshd:'\n")
    rc, summary = _deploy(nodes, inventory, tmp_path / "upgrade-2", "upgrade", NEW, NEW_FIRMWARE)
    assert rc == 1, summary
    (failure,) = summary["failures"]
    assert failure["host"] == three and failure["kind"] == "unreachable", failure
    assert "Connection refused" in failure["message"], failure  # SSH's own words
    assert summary["hosts"][one]["changed"] == 0  # finished before: left alone
    assert _hook_calls(tmp_path)[3:] == [f"drain {two}", f"resume {two}", f"drain {three}"]

    rc, hosts, problems = _status(nodes, inventory, tmp_path / "status-2")
    assert rc == 1
    assert hosts[three]["reachable"] is False and "unreachable" in hosts[three]["problems"][0]
    lost = subprocess.run(["podman", "exec", three, "cat", ROLLOUT_FACT],
                          check=True, capture_output=True, text=True, timeout=60).stdout
    assert json.loads(lost) == {"phase": "draining", "from_set": OLD, "to_set": NEW}
    for host in (one, two):
        assert (hosts[host]["stack_set"], hosts[host]["rollout_phase"]) == (NEW, "done")
        assert hosts[host]["problems"] == []

    # 3. sshd is back: the re-run drains the third host again, upgrades and resumes it.
    subprocess.run(["podman", "exec", three, "systemctl", "start", "ssh.service"], check=True,
                   capture_output=True, timeout=120)
    rc, summary = _deploy(nodes, inventory, tmp_path / "upgrade-3", "upgrade", NEW, NEW_FIRMWARE)
    assert rc == 0, summary["failures"]
    assert summary["hosts"][one]["changed"] == 0 and summary["hosts"][two]["changed"] == 0
    assert summary["hosts"][three]["changed"] > 0
    assert _hook_calls(tmp_path)[6:] == [f"drain {three}", f"resume {three}"]

    rc, hosts, problems = _status(nodes, inventory, tmp_path / "status-3")
    assert rc == 0, (hosts, problems)
    assert problems == []
    for host in NODES:
        assert (hosts[host]["stack_set"], hosts[host]["rollout_phase"]) == (NEW, "done")
        assert hosts[host]["driver"] == "25.5.0" and hosts[host]["problems"] == []
