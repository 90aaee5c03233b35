"""The play's one state read (module stack_state, plugin_utils/state_cache.py): it answers what
each role's read module answers alone, a role's read takes that answer only for the same
arguments in the same play and only once, and the run_counts callback counts no module run for
a read taken from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import ansible_playbook, module_result

from ansible_collections.ascend_serve.fleet.plugins.module_utils.state_reads import (
    READS,
    ReadRefusedError,
    checked_arguments,
)
from ansible_collections.ascend_serve.fleet.plugins.plugin_utils.state_cache import (
    take,
    with_request,
)


def _dpkg_status(tmp_path: Path) -> Path:
    status = tmp_path / "status"
    status.write_text("Package: make\nStatus: install ok installed\nVersion: 4.3-4.1\n"
                      "Architecture: amd64\n\n"
                      "Package: linux-image-6.1.0-28-amd64\nStatus: hold ok installed\n"
                      "Version: 6.1.119-1\nArchitecture: amd64\n\n")
    return status


def _reads(tmp_path: Path) -> dict[str, dict[str, Any]]:
    install = tmp_path / "Ascend"
    (install / "driver").mkdir(parents=True)
    (install / "driver" / "version.info").write_text("Version=25.2.0\n")
    return {
        "os_base_state": {"package_manager": "apt", "packages": ["make", "gcc"],
                          "hold": ["linux-image-6.1.0-28-amd64"],
                          "dpkg_status": str(_dpkg_status(tmp_path)),
                          "apt_sources": str(tmp_path / "apt")},
        "npu_driver_facts": {"install_path": str(install), "user": "root", "group": "root",
                             "uid": "0", "gid": 0,
                             "ledger_path": str(tmp_path / "ledger.fact")},
        "cann_facts": {"install_path": str(install), "files": [str(tmp_path / "none.env")]},
        "host_runtime_facts": {"python": ""},
        "host_tuning_state": {"sysctl": ["kernel.pid_max"],
                              "limits_file": str(tmp_path / "limits"),
                              "sysctl_file": str(tmp_path / "sysctl.conf"),
                              "files": [str(tmp_path / "none")],
                              "packages": ["make", "libjemalloc2"],
                              "package_manager": "apt", "dpkg_status": str(_dpkg_status(tmp_path))},
        "python_env_state": {"prefix": str(tmp_path / "venv"), "packages": ["make"],
                             "package_manager": "apt", "dpkg_status": str(_dpkg_status(tmp_path)),
                             "marker": str(tmp_path / "installed.json")},
    }


def test_the_play_read_answers_what_each_module_answers_alone(tmp_path: Path) -> None:
    reads = _reads(tmp_path)
    combined = module_result("stack_state", {"reads": {**reads, "cann_facts_unused": None}},
                             tmp_path)
    assert combined.get("failed") is not True, combined
    cache = combined["ansible_facts"]["ascend_state_cache"]
    assert set(cache["reads"]) == set(READS)  # a null request is left out
    assert combined["refused"] == {}
    for name, request in reads.items():
        alone = module_result(name, request, tmp_path)
        answered = cache["reads"][name]
        assert answered["request"] == request
        assert answered["result"]["ansible_facts" if READS[name].FACT else "missing_packages"] \
            == alone["ansible_facts" if READS[name].FACT else "missing_packages"], name
    assert cache["reads"]["os_base_state"]["result"]["missing_packages"] == ["gcc"]
    assert cache["reads"]["os_base_state"]["result"]["converged"] is False
    assert (cache["reads"]["npu_driver_facts"]["result"]["ansible_facts"]
            ["ascend_npu_driver_state"]["driver_version"]) == "25.2.0"


def test_a_read_it_cannot_do_is_left_to_the_role(tmp_path: Path) -> None:
    reads = _reads(tmp_path)
    (tmp_path / "Ascend" / "driver" / "version.info").write_text("no version here\n")
    result = module_result("stack_state", {"reads": {
        "os_base_state": {"packages": ["make"]},  # package_manager is required
        "npu_driver_facts": reads["npu_driver_facts"],  # a file it cannot read
        "no_such_read": {},
        "cann_facts": "not a mapping",
    }}, tmp_path)
    assert result.get("failed") is not True, result
    assert result["ansible_facts"]["ascend_state_cache"]["reads"] == {}
    refused = result["refused"]
    assert set(refused) == {"os_base_state", "npu_driver_facts", "no_such_read", "cann_facts"}
    assert "package_manager" in refused["os_base_state"]
    assert "version.info" in refused["npu_driver_facts"]


CACHE: dict[str, Any] = {"play": "p1", "reads": {
    "npu_driver_facts": {"request": {"install_path": "/usr/local/Ascend", "uid": "1000"},
                         "result": {"changed": False, "ansible_facts": {
                             "ascend_npu_driver_state": {"driver_version": "25.2.0"}}}},
    "cann_facts": {"request": {}, "result": {"changed": False, "ansible_facts": {
        "ascend_cann_state": {"toolkits": []}}}},
}}


def test_an_answer_is_taken_for_the_same_checked_arguments_in_the_same_play_once() -> None:
    request = checked_arguments("npu_driver_facts", {"uid": 1000})  # "1000" checks to 1000 too
    taken = take(CACHE, "p1", "npu_driver_facts", request)
    assert taken is not None
    answer, rest = taken
    assert answer["ansible_facts"]["ascend_npu_driver_state"]["driver_version"] == "25.2.0"
    assert rest == {"play": "p1", "reads": {"cann_facts": CACHE["reads"]["cann_facts"]}}
    assert take(rest, "p1", "npu_driver_facts", request) is None  # taken once
    assert take(CACHE, "p2", "npu_driver_facts", request) is None  # another play's
    assert take(CACHE, "", "npu_driver_facts", request) is None
    other = checked_arguments("npu_driver_facts", {"uid": 1001})
    assert take(CACHE, "p1", "npu_driver_facts", other) is None  # the role's inputs changed
    assert take(None, "p1", "npu_driver_facts", request) is None
    assert take(CACHE, "p1", "os_base_state", {}) is None  # not read by the play


def test_the_answer_carries_its_checked_arguments_where_the_ledger_takes_them() -> None:
    request = checked_arguments("cann_facts", {})
    fact = with_request("cann_facts", {"ansible_facts": {"ascend_cann_state": {}}}, request)
    assert fact["ansible_facts"]["ascend_cann_state"]["request"] == request
    result = with_request("os_base_state", {"converged": True}, {"packages": []})
    assert result["request"] == {"packages": []}
    failed = with_request("os_base_state", {"failed": True, "msg": "x"}, {})
    assert "request" not in failed
    with pytest.raises(ReadRefusedError):
        checked_arguments("os_base_state", {})


def test_in_a_play_the_role_reads_take_the_answer_and_no_module_runs(tmp_path: Path) -> None:
    reads = _reads(tmp_path)
    changed = {**reads["cann_facts"], "files": []}
    play = [{
        "name": "One read", "hosts": "localhost", "gather_facts": False,
        "tasks": [
            {"name": "Read once", "ascend_serve.fleet.stack_state": {"reads": reads}},
            {"name": "Driver", "ascend_serve.fleet.npu_driver_facts": reads["npu_driver_facts"],
             "register": "driver"},
            {"name": "OS base", "ascend_serve.fleet.os_base_state": reads["os_base_state"],
             "register": "os_base"},
            {"name": "Driver again", "ascend_serve.fleet.npu_driver_facts":
                reads["npu_driver_facts"], "register": "driver_again"},
            {"name": "CANN asked otherwise", "ascend_serve.fleet.cann_facts": changed,
             "register": "cann"},
            {"name": "Show", "ansible.builtin.copy": {"dest": str(tmp_path / "out.json"),
             "content": "{{ {'driver': driver.read_from, 'os_base': os_base.read_from,"
                        " 'again': driver_again.read_from, 'cann': cann.read_from,"
                        " 'converged': os_base.converged, 'request': os_base.request,"
                        " 'left': ansible_facts.ascend_state_cache.reads.keys() | sort,"
                        " 'version': ansible_facts.ascend_npu_driver_state.driver_version,"
                        " 'driver_request': ansible_facts.ascend_npu_driver_state.request}"
                        " | to_json }}"}},
        ]}, {
        "name": "Another play", "hosts": "localhost", "gather_facts": False,
        "tasks": [
            {"name": "Host runtime", "ascend_serve.fleet.host_runtime_facts":
                reads["host_runtime_facts"], "register": "runtime"},
            {"name": "Show", "ansible.builtin.copy": {"dest": str(tmp_path / "out2.json"),
             "content": "{{ runtime.read_from | to_json }}"}},
        ]}]
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    counts = tmp_path / "counts.jsonl"
    proc = ansible_playbook("-i", "localhost,", "-c", "local", "-e",
                            "ansible_python_interpreter={{ ansible_playbook_python }}",
                            str(playbook), timeout=120, env={
                                "ANSIBLE_CALLBACKS_ENABLED": "ascend_serve.fleet.run_counts",
                                "ASCEND_SERVE_RUN_COUNTS": str(counts)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    assert (out["driver"], out["os_base"], out["again"], out["cann"]) == \
        ("play", "play", "host", "host")
    assert out["converged"] is False and out["version"] == "25.2.0"
    # what a role records as its ledger's read: the arguments, checked (uid "0" -> 0)
    assert out["request"] == checked_arguments("os_base_state", reads["os_base_state"])
    assert out["driver_request"]["uid"] == 0
    # cann's answer, asked with other arguments, was not taken; the host runtime's is another
    # play's
    assert out["left"] == ["cann_facts", "host_runtime_facts", "host_tuning_state",
                           "python_env_state"]
    assert json.loads((tmp_path / "out2.json").read_text()) == "host"
    hosts = json.loads(counts.read_text().splitlines()[-1])["hosts"]
    # stack_state, driver again, cann, host runtime, two copies: 6 module runs of 8 tasks
    assert (hosts["localhost"]["tasks"], hosts["localhost"]["module_runs"]) == (8, 6)
