"""The vllm_service role without a server: the tasks that write its API key, how it places the
hosts of a multi-node profile (head / headless, the head's address) or refuses a group of the
wrong size, and how its check tasks wait for vLLM phase by phase and fail with the phase, the
error and the fix (a fake systemctl/journalctl serving real startup logs of the corpus). The
contract every role keeps (its variables among it): test_role_contract.py."""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import role_files
import yaml
from ansible_run import ansible_playbook
from paths import CORPUS, ROLES, ROOT

ROLE = ROLES / "vllm_service"


def test_tasks_touching_the_key_hide_it() -> None:
    tasks = [t for p in (ROLE / "tasks").glob("*.yml") for t in role_files.load(p) or []]
    flat = [t for t in tasks for t in (t.get("block", [t]))]
    # The key reaches a task's content directly or through _vllm_service_api_key_content.
    writing = [t for t in flat
               if ("vllm_service_api_key }}" in yaml.safe_dump(t)
                   or "_vllm_service_api_key_content }}" in yaml.safe_dump(t))
               and "content" in yaml.safe_dump(t)]
    assert writing, "no task writes the key: the check below would hold vacuously"
    for task in writing:
        assert task.get("no_log") is True, task["name"]


def _place(
    tmp_path: Path, hosts: dict[str, dict[str, Any]], profile: str
) -> subprocess.CompletedProcess[str]:
    inventory = {"all": {"children": {"ascend_nodes": {"hosts": hosts}}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "vllm_service_profile": profile, "vllm_service_model_dir": str(tmp_path / "model"),
        "vllm_service_env_prefix": str(tmp_path / "env")}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    return ansible_playbook("--check", "-i", str(tmp_path / "hosts.yml"),
                            str(ROOT / "tests" / "playbooks" / "vllm_service_nodes.yml"))


def test_two_node_profile_places_head_and_headless(tmp_path: Path) -> None:
    proc = _place(tmp_path, {"node-a": {"hccl_if_ip": "192.0.2.11"},
                             "node-b": {"hccl_if_ip": "192.0.2.12"}}, "deepseek-r1-w8a8-2xa2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    placed = sorted(re.findall(r"PLACEMENT (\S+) rank=(\d) head=(\S+) address=(\S*)", proc.stdout))
    assert placed == [("node-a", "0", "node-a", "192.0.2.11"),
                      ("node-b", "1", "node-a", "192.0.2.11")]
    # Check mode reports what the stand-in hosts lack instead of failing.
    assert "not there yet" in proc.stdout


def test_two_node_profile_refuses_a_group_of_three(tmp_path: Path) -> None:
    proc = _place(tmp_path, {f"node-{c}": {"hccl_if_ip": f"192.0.2.{i}"}
                             for i, c in enumerate("abc", 11)}, "deepseek-r1-w8a8-2xa2")
    assert proc.returncode != 0
    assert "runs on 2 nodes, but group ascend_nodes has 3 host(s) (node-a, node-b, node-c)" in (
        proc.stdout)
    assert "PLACEMENT" not in proc.stdout


def _resolved(name: str) -> dict[str, Any]:
    """The fact ascend_stack resolves (its part the profile check reads: the serving set)."""
    return {"name": name, "serving": {"name": name}}


def test_a_set_below_the_profiles_tutorial_is_refused_before_any_change(tmp_path: Path) -> None:
    # The set resolved in preflight (ascend_stack_resolved) is below V3.2's minimum (0.13.0).
    proc = _place(tmp_path, {"node-a": {"hccl_if_ip": "192.0.2.11",
                                        "ascend_stack_resolved": _resolved("vllm-ascend-0.11.0")},
                             "node-b": {"hccl_if_ip": "192.0.2.12",
                                        "ascend_stack_resolved": _resolved("vllm-ascend-0.11.0")}},
                  "deepseek-v3.2-w8a8-2xa2")
    assert proc.returncode != 0
    assert "vllm_service on node-a: nothing was changed:" in proc.stdout
    assert "needs vllm-ascend >= 0.13.0" in proc.stdout
    assert "fix: install set vllm-ascend-0.13.0" in proc.stdout
    assert "PLACEMENT" not in proc.stdout
    ok = _place(tmp_path, {"node-a": {"hccl_if_ip": "192.0.2.11",
                                      "ascend_stack_resolved": _resolved("vllm-ascend-0.13.0")},
                           "node-b": {"hccl_if_ip": "192.0.2.12",
                                      "ascend_stack_resolved": _resolved("vllm-ascend-0.13.0")}},
                "deepseek-v3.2-w8a8-2xa2")
    assert ok.returncode == 0, ok.stdout[-3000:]


def test_a_profile_for_other_chips_is_refused(tmp_path: Path) -> None:
    proc = _place(tmp_path, {"node-a": {"ascend_stack_chip": "910B"}}, "deepseek-r1-w8a8-a3")
    assert proc.returncode != 0
    assert ("profile deepseek-r1-w8a8-a3 is for 910C chips but the host has 910B" in
            " ".join(proc.stdout.split()))
    ok = _place(tmp_path, {"node-a": {"ascend_stack_chip": "910C"}}, "deepseek-r1-w8a8-a3")
    assert ok.returncode == 0, ok.stdout[-3000:]


def test_single_node_profile_serves_on_every_host(tmp_path: Path) -> None:
    proc = _place(tmp_path, {"node-a": {}, "node-b": {}}, "tiny-qwen2")
    assert proc.returncode == 0, proc.stdout[-3000:]
    placed = sorted(re.findall(r"PLACEMENT (\S+) rank=(\d) head=(\S+)", proc.stdout))
    assert placed == [("node-a", "0", "node-a"), ("node-b", "0", "node-b")]


def test_npu_profiles_source_what_the_cann_fact_lists(tmp_path: Path) -> None:
    # From CANN 8.5 the toolkit's set_env.sh is under cann-<version>/: the cann role's fact says
    # where; a host without that fact falls back to the classic paths.
    cann85 = ["/usr/local/Ascend/cann-8.5.0/set_env.sh", "/usr/local/Ascend/nnal/atb/set_env.sh"]
    proc = _place(tmp_path, {
        "node-a": {"hccl_if_ip": "192.0.2.11",
                   "ansible_local": {"ascend_cann": {"set_env": cann85}}},
        "node-b": {"hccl_if_ip": "192.0.2.12"}}, "deepseek-r1-w8a8-2xa2")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    found = dict(re.findall(r"PLACEMENT (\S+) .*?set_env=(\S*)", proc.stdout))
    assert found == {
        "node-a": ",".join(cann85),
        "node-b": ("/usr/local/Ascend/ascend-toolkit/set_env.sh,"
                   "/usr/local/Ascend/nnal/atb/set_env.sh")}


# --- check.yml: waiting for vLLM phase by phase --------------------------------------------------
# The role's check tasks run against a fake systemctl and journalctl (on PATH) that hand out a
# real startup log of the corpus (tests/data/corpus/vllm-log/), a little more at each call, and a
# real HTTP /health that answers 200 once the log says the startup is complete.

VLLM_LOGS = CORPUS / "vllm-log"
FAKE_TOOL = """#!{python}
import json, sys, time
state_file, calls_file = {state!r}, {calls!r}
state = json.load(open(state_file))
with open(calls_file, "a") as fh:
    fh.write(json.dumps([{name!r}, *sys.argv[1:]]) + "\\n")
calls = [json.loads(line)[0] for line in open(calls_file)]
if {name!r} == "systemctl":
    unit = dict(state["unit"])
    if state.get("restart_after") and calls.count("systemctl") > state["restart_after"]:
        unit["InvocationID"] = "inv-2"
    unit["ExecMainStartTimestampMonotonic"] = int(state["started_at"] * 1e6)
    for key, value in unit.items():
        print(f"{{key}}={{value}}")
else:
    wanted = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("_SYSTEMD_INVOCATION_ID=")]
    lines = open(state["journal"][wanted[0]], encoding="utf-8").read().splitlines(keepends=True)
    shown = min(len(lines), state["lines_per_call"] * calls.count("journalctl"))
    with open(state_file + ".shown", "w") as fh:
        fh.write("".join(lines[:shown]))
    sys.stdout.write("".join(lines[:shown]))
"""
CHECK_PLAYBOOK = """---
- name: Check a vLLM start
  hosts: all
  gather_facts: false
  tasks:
    - name: Take the profile
      ansible.builtin.set_fact:
        _vllm_service_profile: {profile}

    - name: Run the role's check tasks
      ansible.builtin.include_role:
        name: ascend_serve.fleet.vllm_service
        tasks_from: check
"""


class _Health(http.server.BaseHTTPRequestHandler):
    """200 on /health once the fake journal has shown "Application startup complete."."""

    shown: Path

    def do_GET(self) -> None:
        ready = self.shown.is_file() and "Application startup complete." in self.shown.read_text()
        self.send_response(200 if self.path == "/health" and ready else 503)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def _check(tmp_path: Path, sample: str, unit: dict[str, str], health_timeout_s: int = 600,
           started_ago: float = 5.0, lines_per_call: int = 1000, restart_after: int = 0,
           ) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state, calls = tmp_path / "state.json", tmp_path / "calls.jsonl"
    calls.write_text("")
    state.write_text(json.dumps({
        "unit": {"InvocationID": "inv-1", "NRestarts": "0", "MainPID": "4242", **unit},
        "journal": {"inv-1": str(VLLM_LOGS / f"{sample}.log"),
                    "inv-2": str(VLLM_LOGS / "ascend-glm5-w4a8-loading-issue6734.log")},
        # A fixed start (CLOCK_MONOTONIC is the same in every process): the check reads its
        # clock after this, so the uptime it reports is at least started_ago however slow the
        # fake tools start under load.
        "started_at": time.monotonic() - started_ago, "lines_per_call": lines_per_call,
        "restart_after": restart_after}))
    for name in ("systemctl", "journalctl"):
        tool = bin_dir / name
        tool.write_text(FAKE_TOOL.format(python=sys.executable, state=str(state),
                                         calls=str(calls), name=name))
        tool.chmod(0o755)
    handler = type("Health", (_Health,), {"shown": Path(f"{state}.shown")})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    profile = {"name": "tiny-deepseek-v3", "host": "127.0.0.1", "port": server.server_address[1],
               "health_timeout_s": health_timeout_s, "model": {"served_name": "tiny-deepseek-v3"},
               "reasoning_parser": None}
    (tmp_path / "check.yml").write_text(CHECK_PLAYBOOK.format(profile=json.dumps(profile)))
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"node-a": {}}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "vllm_service_validate": False, "vllm_service_wait_delay": 1}}}))
    try:
        proc = ansible_playbook("-i", str(tmp_path / "hosts.yml"), str(tmp_path / "check.yml"),
                                env={"PATH": f"{bin_dir}:{os.environ['PATH']}"}, timeout=300)
    finally:
        server.shutdown()
        server.server_close()
    return proc, [json.loads(line) for line in calls.read_text().splitlines()]


def test_check_waits_phase_by_phase_and_reports_progress(tmp_path: Path) -> None:
    proc, calls = _check(tmp_path, "cpu-0.32.0-eager-ok", {"ActiveState": "active",
                         "SubState": "running", "Result": "success"}, lines_per_call=10)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-2000:]
    tasks = re.findall(r"TASK \[ascend_serve\.fleet\.vllm_service : ([^\]]+)\]", out)
    assert tasks[:7] == [
        "Read where vLLM's current start stands", "Wait for vLLM: weights loaded",
        "Report vLLM's progress: weights loaded",
        "Wait for vLLM: engine ready (KV cache, graph capture)",
        "Report vLLM's progress: engine ready", "Wait for vLLM: /health",
        "The server must become healthy"]
    # The log arrives 10 lines per reading: the waits retry, showing which milestone they wait for.
    assert "FAILED - RETRYING: [node-a]: Wait for vLLM: weights loaded" in out
    assert "ascend-vllm on node-a: weights loaded (in 0.01 s)," in out
    assert "ascend-vllm on node-a: engine ready (init took 0.07 s)," in out
    assert "ascend-vllm on node-a is healthy (application startup complete," in out
    journal = [c for c in calls if c[0] == "journalctl"]
    assert journal and all(c[-2:] == ["_SYSTEMD_UNIT=ascend-vllm.service",
                                      "_SYSTEMD_INVOCATION_ID=inv-1"] for c in journal)


def test_check_fails_on_a_failed_start_with_its_phase_error_and_fix(tmp_path: Path) -> None:
    proc, _ = _check(tmp_path, "cpu-0.32.0-fail-kv-cache", {
        "ActiveState": "activating", "SubState": "auto-restart", "Result": "exit-code"})
    out = proc.stdout
    assert proc.returncode != 0
    # The first reading already shows the failure: no milestone is waited for.
    assert "FAILED - RETRYING" not in out
    assert ("ascend-vllm on node-a does not serve http://127.0.0.1:" in out
            and "/health: the start failed in phase weights loaded (in 0.01 s) for " in out), out
    assert "Error: ValueError: Available memory on node 0 (22.5/23.54 GiB)" in out
    assert "Fix: the KV cache does not fit in the memory left after the weights" in out
    assert "Last log lines: " in out
    assert "| RuntimeError: Engine core initialization failed. See root cause above." in out


def test_check_fails_when_the_start_outlasts_the_profile_budget(tmp_path: Path) -> None:
    proc, _ = _check(tmp_path, "ascend-glm5-w4a8-loading-issue6734", {
        "ActiveState": "active", "SubState": "running", "Result": "success"},
        health_timeout_s=600, started_ago=1000.0)
    out = proc.stdout
    assert proc.returncode != 0
    assert ("no answer within the 600 s the profile allows (health_timeout_s) in phase loading "
            "weights (14/99 shards, 00:19 elapsed) for ") in out, out[-3000:]
    # The start was 1000 s before the check began; the run itself adds however long it takes.
    after = re.search(r"\((\d+\.\d) s after its start\)", out)
    assert after is not None and float(after.group(1)) >= 1000.0, out[-3000:]
    assert ("Fix: weights on slow or network storage load slowly: stage them on local disk with "
            "model_store, or raise health_timeout_s in the serving profile") in out


def test_check_fails_when_vllm_dies_and_systemd_restarts_it(tmp_path: Path) -> None:
    proc, calls = _check(tmp_path, "ascend-glm5-w4a8-loading-issue6734", {
        "ActiveState": "active", "SubState": "running", "Result": "success"}, restart_after=2)
    out = proc.stdout
    assert proc.returncode != 0
    assert "FAILED - RETRYING: [node-a]: Wait for vLLM: weights loaded" in out
    assert "/health: vLLM exited and systemd restarted it in phase loading weights (14/99" in out
    assert "Fix: vLLM exited in phase loading_weights" in out
    # It kept reading the start it watched, not the new one.
    journal = [c[-1] for c in calls if c[0] == "journalctl"]
    assert set(journal) == {"_SYSTEMD_INVOCATION_ID=inv-1"}
