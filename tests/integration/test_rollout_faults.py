"""A rolling upgrade over three simulated Atlas 800 A2 nodes reached by real SSH (host keys
checked) and serving, with faults in the middle of a batch: the ``ascend_serve.fleet.upgrade``
playbook through ``ascend-serve deploy``, ``ascend-serve fleet status`` as the operator reads the
result, and each node's server asked for ``/health`` from the controller as a load balancer would.

The nodes (``ascend_sim.sshfleet``: a derived image with sshd and os_base's Debian packages
pre-installed) first get the older set vllm-ascend-0.11.0 (HDK 25.3.rc1, CANN 8.3.RC2) with
``stack`` and a server each with ``serving``; then ``upgrade.yml``
moves them to vllm-ascend-0.13.0 with the default batches (one canary, then 20% at a time: here
one host per batch) and a stand-in load balancer (``tests/data/lb-hook.sh``) that plants each
case's fault right after it took a host out:

1. a chip of the second host turns Critical while that host is drained: the batch fails naming
   host and chip, the rollout stops; the canary is upgraded, serves, is resumed and ``done``; the
   second host stays drained on the old set; the third is never touched and keeps serving;
2. the chip is healthy again, and the second host's model becomes unreadable to the service user
   while it is drained: its stack is upgraded, then its server never answers ``/health``; the
   batch fails naming host, unit and the server's own error, the rollout stops, the first and
   third hosts keep serving, the second stays drained (``upgrading``, unit not active);
3. the model is readable again, and the third host's sshd goes away (sessions cut) after its
   drain: the second host (already on the new set) is taken through its batch again, its failed
   unit started again and resumed; the run names the third host unreachable and stops;
4. with sshd back, a re-run repairs: every host on the new set, serving, resumed, ``done``; the
   hosts finished before change nothing.

Last, the canary is checked as one upgraded host (what molecule ``stack_upgrade`` checked before it
was folded in here): the shared stack verifier (``molecule/shared/verify_stack.yml``) on the new
set, the upgrade's part of the vendor install log (firmware flashed before the driver is
replaced, then CANN, all in upgrade mode) after the older set's first install (driver before
firmware), the old toolkit gone, the driver's install record of type upgrade, its rollout record
``done`` on the new set, and the load balancer called once to drain it and once to resume it.

The serving environment and the model staging are skipped (tags env, models, as in molecule
``stack_upgrade`` did): the nodes hold a tiny model's config.json and, as their serving environment,
``tests/data/vllm-standin``, a stand-in ``vllm serve`` that reads the model's config.json and
answers ``/health`` and ``/v1/models`` (three real vLLM CPU servers would cost this 2-core CI
about ten minutes; real vLLM behind the same role is molecule ``serving``'s and the main job's).
The wrapper's validate is therefore off here; the fault under test is the health check.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import ansible_playbook, counted_playbook

from ascend_serve.serving.tiny_model import VOCAB_SIZE, model_config_kwargs
from ascend_sim.sshfleet import Fleet, build_image, fleet_of, sim_env, write_inventory

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "ascend-serve")
NODES = ("ascend-roll-1", "ascend-roll-2", "ascend-roll-3")
OLD, OLD_FIRMWARE = "vllm-ascend-0.11.0", "7.7.0.1.200"
NEW, NEW_FIRMWARE = "vllm-ascend-0.13.0", "7.8.0.2.212"
SKIP = "env,models"
# Issue 21: a converged host costs at most this many SSH executions in a no-op stack run. Issue
# 33: two, fact gathering and the play's one state read (stack_state), where there were five.
NOOP_SSH_CEILING = 2
# Issue 33: and six tasks, fact gathering, that read, the three roles' skipped includes and the
# skipped record of settled roles (playbooks/stack.yml), where there were 26.
NOOP_TASKS = 6
ROLLOUT_FACT = "/etc/ansible/facts.d/ascend_rollout.fact"
STANDIN = "/opt/vllm-standin"  # vllm_service_env_prefix: the stand-in is its bin/vllm
MODEL_CONFIG = "/var/lib/ascend-serve/models/tiny-deepseek-v3/config.json"
PORT = 8000  # the tiny-deepseek-v3 profile's
INSTALL_LOG = "/var/log/ascend_seclog/ascend_install.log"  # the simulated installers' log
VERIFY_STACK = ROOT / "molecule/shared/verify_stack.yml"


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
                    rollout_resume_command=[*hook, "resume"],
                    vllm_service_env_prefix=STANDIN, vllm_service_env_files=[],
                    vllm_service_validate=False,
                    vllm_service_overrides={"health_timeout_s": 20})
    for serving in ("python_env_indexes", "python_env_ca_bundle", "model_store_source"):
        settings.pop(serving)
    config = {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
              "torch_dtype": "bfloat16", **model_config_kwargs("deepseek_v3", VOCAB_SIZE)}
    (tmp_path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    with fleet_of(NODES, mirror, tmp_path / "sim") as nodes:
        for name in NODES:
            _provision(name, tmp_path / "config.json")
        inventory = _write_inventory(nodes, settings, pins)
        yield nodes, inventory


def _podman(*args: str) -> None:
    subprocess.run(["podman", *args], check=True, capture_output=True, timeout=120)


def _provision(name: str, config: Path) -> None:
    """What the site's image would hold: the stand-in server, and the model (config only)."""
    model_dir = str(Path(MODEL_CONFIG).parent)
    _podman("exec", name, "mkdir", "-p", f"{STANDIN}/bin", model_dir)
    _podman("cp", str(ROOT / "tests/data/vllm-standin"), f"{name}:{STANDIN}/bin/vllm")
    _podman("cp", str(config), f"{name}:{MODEL_CONFIG}")
    _podman("exec", name, "chmod", "0755", f"{STANDIN}/bin/vllm", model_dir)
    _podman("exec", name, "chmod", "0644", MODEL_CONFIG)


def _health(nodes: Fleet, name: str) -> int | None:
    """The node's /health status as the load balancer sees it; None when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://{nodes.addresses[name]}:{PORT}/health",
                                    timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


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


def _only_failure(summary: dict[str, Any], host: str, kind: str,
                  role: str | None = None) -> str:
    """The run's one failure is ``host``'s, of ``kind`` (in ``role``); returns its message."""
    (failure,) = summary["failures"]
    assert (failure["host"], failure["kind"]) == (host, kind), failure
    if role is not None:
        assert failure["role"] == role, failure
    return str(failure["message"])


def _plant(tmp_path: Path, action: str, host: str, script: str) -> None:
    fault = tmp_path / "lb.log.d" / f"{action}-{host}"
    fault.write_text("#!/bin/sh\nset -eu\n" + script)
    fault.chmod(0o755)


def _hook_calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "lb.log").read_text().splitlines()


def _read(name: str, path: str) -> str:
    return subprocess.run(["podman", "exec", name, "cat", path], check=True, capture_output=True,
                          text=True, timeout=60).stdout


def _install_starts(name: str) -> list[str]:
    """The "install start" lines of the node's vendor install log, in order."""
    return [line for line in _read(name, INSTALL_LOG).splitlines() if "install start" in line]


def _exists(name: str, path: str) -> bool:
    return subprocess.run(["podman", "exec", name, "test", "-e", path], check=False,
                          capture_output=True, timeout=60).returncode == 0


@pytest.mark.molecule
def test_rollout_stops_at_the_failed_batch_and_a_rerun_repairs(
        fleet: tuple[Fleet, Path], tmp_path: Path) -> None:
    nodes, inventory = fleet
    one, two, three = NODES

    # The fleet as it serves today: the older set on every host, all at once, and its servers.
    for playbook in ("stack", "serving"):
        rc, summary = _deploy(nodes, inventory, tmp_path / f"install-{Path(playbook).stem}",
                              playbook, OLD, OLD_FIRMWARE)
        assert rc == 0, summary["failures"]
    assert {host: _health(nodes, host) for host in NODES} == dict.fromkeys(NODES, 200)
    # The older set's first install on the canary: the driver before the firmware.
    old_starts = _install_starts(one)
    assert len(old_starts) == 5, old_starts
    assert "[driver][25.3.rc1]" in old_starts[0], old_starts
    assert f"[firmware][{OLD_FIRMWARE}]" in old_starts[1], old_starts

    # A no-op re-run of the stack over SSH costs one fact gathering and a few round trips per
    # host, and starts no package manager (counted: the run_counts callback, bench/sshcount).
    def stack_rerun(*extra: str) -> dict[str, dict[str, int]]:
        proc, counts = counted_playbook(
            "ascend_serve.fleet.stack", "-i", str(inventory), "--skip-tags", SKIP,
            "-e", f"ascend_stack_set={OLD}", "-e", f"npu_driver_firmware_version={OLD_FIRMWARE}",
            *extra, env=_env(nodes), workdir=tmp_path, addresses=nodes.addresses, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert set(counts) == set(NODES), counts
        return counts

    for host, counted in stack_rerun().items():
        assert counted["changed"] == 0, (host, counted)
        assert counted["fact_gatherings"] <= 1, (host, counted)
        assert counted["package_manager_runs"] == 0, (host, counted)
        assert counted["ssh_executions"] <= NOOP_SSH_CEILING, (host, counted)
        assert counted["tasks"] == NOOP_TASKS, (host, counted)
    # A changed input enters its role (npu_driver, and ascend_stack it depends on), which finds
    # nothing to do; the run records the role settled with its new fingerprint, its one change.
    for host, counted in stack_rerun("-e", "npu_driver_reboot_timeout=1201").items():
        assert counted["tasks"] > NOOP_TASKS + 10, (host, counted)
        assert (counted["changed"], counted["package_manager_runs"]) == (1, 0), (host, counted)

    # 1. A chip of the second host goes Critical once that host is out of the balancer.
    sim = f"{sys.executable} -m ascend_sim"
    _plant(tmp_path, "drain", two, f"{sim} health {nodes.node_dir(two)} 3 Critical\n")
    rc, summary = _deploy(nodes, inventory, tmp_path / "upgrade-1", "upgrade", NEW, NEW_FIRMWARE)
    assert rc == 1, summary
    message = _only_failure(summary, two, "failed", "npu_driver")
    assert f"npu_driver on {two}: upgrade refused, 1 NPU" in message, message
    assert "3 Critical" in message, message
    assert _hook_calls(tmp_path) == [f"drain {one}", f"resume {one}", f"drain {two}"]
    # The canary serves the new set, the third host the old one; the second was stopped.
    assert {host: _health(nodes, host) for host in NODES} == {one: 200, two: None, three: 200}

    rc, hosts, problems = _status(nodes, inventory, tmp_path / "status-1")
    assert rc == 1
    assert (hosts[one]["stack_set"], hosts[one]["rollout_phase"]) == (NEW, "done")
    assert hosts[one]["problems"] == [] and hosts[one]["serving"] is True
    assert (hosts[two]["stack_set"], hosts[two]["rollout_phase"]) == (OLD, "upgrading")
    assert hosts[two]["problems"][0] == (
        f"left upgrading by an unfinished upgrade to {NEW} (out of the load balancer): re-run "
        "ascend_serve.fleet.upgrade")
    assert hosts[two]["serving"] is False and len(hosts[two]["problems"]) == 2
    assert (hosts[three]["stack_set"], hosts[three]["rollout_phase"]) == (OLD, None)
    assert hosts[three]["problems"] == [] and hosts[three]["serving"] is True
    assert any(OLD in p and NEW in p for p in problems), problems

    # 2. The chip is healthy again; the second host's model becomes unreadable to the service
    # user while that host is out: its stack upgrade goes through, its server never gets healthy.
    _sim("health", str(nodes.node_dir(two)), "3", "OK")
    _plant(tmp_path, "drain", two, f"podman exec {two} chmod 0600 {MODEL_CONFIG}\n")
    rc, summary = _deploy(nodes, inventory, tmp_path / "upgrade-2", "upgrade", NEW, NEW_FIRMWARE)
    assert rc == 1, summary
    message = _only_failure(summary, two, "failed", "vllm_service")
    # Seen dying from the journal (systemd restarting it), not waited out to the 20 s budget.
    assert f"ascend-vllm on {two} does not serve http://127.0.0.1:8000/health" in message, message
    assert "vLLM is not running" in message and "before its first startup phase" in message, (
        message)
    assert "PermissionError" in message, message  # the server's own last words
    assert summary["hosts"][one]["changed"] == 0  # finished before: left alone
    assert _hook_calls(tmp_path)[3:] == [f"drain {two}"]  # stays out of the balancer
    assert {host: _health(nodes, host) for host in NODES} == {one: 200, two: None, three: 200}

    rc, hosts, problems = _status(nodes, inventory, tmp_path / "status-2")
    assert rc == 1
    assert (hosts[two]["stack_set"], hosts[two]["rollout_phase"]) == (NEW, "upgrading")
    assert hosts[two]["serving"] is False
    assert any("is configured but unit" in p for p in hosts[two]["problems"]), hosts[two]
    assert (hosts[one]["rollout_phase"], hosts[one]["serving"]) == ("done", True)
    assert (hosts[three]["stack_set"], hosts[three]["serving"]) == (OLD, True)

    # 3. The model is readable again; the third host's sshd goes away in the middle of its batch.
    # The second host, on the new set already, is taken through its batch again (its unit used
    # up its start limit while failing) and resumed before the third host's batch.
    _podman("exec", two, "chmod", "0644", MODEL_CONFIG)
    _plant(tmp_path, "drain", three,
           f"podman exec {three} systemctl stop ssh.service\n"
           f"podman exec {three} pkill -KILL -f 'sshd:'\n")
    rc, summary = _deploy(nodes, inventory, tmp_path / "upgrade-3", "upgrade", NEW, NEW_FIRMWARE)
    assert rc == 1, summary
    message = _only_failure(summary, three, "unreachable")
    assert "Connection refused" in message, message  # SSH's own words
    assert summary["hosts"][one]["changed"] == 0
    assert _hook_calls(tmp_path)[4:] == [f"drain {two}", f"resume {two}", f"drain {three}"]
    assert _health(nodes, two) == 200

    rc, hosts, problems = _status(nodes, inventory, tmp_path / "status-3")
    assert rc == 1
    assert hosts[three]["reachable"] is False and "unreachable" in hosts[three]["problems"][0]
    lost = subprocess.run(["podman", "exec", three, "cat", ROLLOUT_FACT],
                          check=True, capture_output=True, text=True, timeout=60).stdout
    assert json.loads(lost) == {"phase": "draining", "from_set": OLD, "to_set": NEW}
    for host in (one, two):
        assert (hosts[host]["stack_set"], hosts[host]["rollout_phase"]) == (NEW, "done")
        assert hosts[host]["problems"] == [] and hosts[host]["serving"] is True

    # 4. sshd is back: the re-run drains the third host again, upgrades and resumes it.
    subprocess.run(["podman", "exec", three, "systemctl", "start", "ssh.service"], check=True,
                   capture_output=True, timeout=120)
    rc, summary = _deploy(nodes, inventory, tmp_path / "upgrade-4", "upgrade", NEW, NEW_FIRMWARE)
    assert rc == 0, summary["failures"]
    assert summary["hosts"][one]["changed"] == 0 and summary["hosts"][two]["changed"] == 0
    assert summary["hosts"][three]["changed"] > 0
    assert _hook_calls(tmp_path)[7:] == [f"drain {three}", f"resume {three}"]

    rc, hosts, problems = _status(nodes, inventory, tmp_path / "status-4")
    assert rc == 0, (hosts, problems)
    assert problems == []
    for host in NODES:
        assert (hosts[host]["stack_set"], hosts[host]["rollout_phase"]) == (NEW, "done")
        assert hosts[host]["driver"] == "25.5.0" and hosts[host]["problems"] == []
        assert hosts[host]["serving"] is True
    assert {host: _health(nodes, host) for host in NODES} == dict.fromkeys(NODES, 200)

    # The canary as one upgraded host: upgraded in the first run, left alone by the three after.
    proc = ansible_playbook(
        str(VERIFY_STACK), "-i", str(inventory), "--limit", one, "-e", json.dumps({
            "expected_driver": "25.5.0", "expected_firmware": NEW_FIRMWARE,
            "expected_cann": "8.5.0", "expected_toolkit_root": "/usr/local/Ascend/cann-8.5.0"}),
        env=_env(nodes), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    starts = _install_starts(one)
    assert starts[: len(old_starts)] == old_starts, starts
    upgrade = starts[len(old_starts):]
    assert len(upgrade) == 5, upgrade
    # An upgrade flashes the firmware first, then replaces the driver, then CANN in order.
    assert f"[firmware][{NEW_FIRMWARE}]" in upgrade[0], upgrade
    assert "[driver][25.5.0] install start, mode=upgrade" in upgrade[1], upgrade
    assert "[toolkit][8.5.0] install start, mode=upgrade" in upgrade[2], upgrade
    assert "[kernels][8.5.0]" in upgrade[3] and "[nnal][8.5.0]" in upgrade[4], upgrade
    assert not _exists(one, "/usr/local/Ascend/ascend-toolkit/8.3.RC2")
    assert "Driver_Install_Type=upgrade" in _read(one, "/etc/ascend_install.info").splitlines()
    record = json.loads(_read(one, ROLLOUT_FACT))
    assert (record["phase"], record["set"]) == ("done", NEW), record
    calls = _hook_calls(tmp_path)
    assert (calls.count(f"drain {one}"), calls.count(f"resume {one}")) == (1, 1), calls
    assert calls.index(f"drain {one}") < calls.index(f"resume {one}"), calls
