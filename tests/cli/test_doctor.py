"""``ascend-serve doctor``: checks, knowledge base, redaction, transports and the command line.

The recordings under ``tests/data/doctor/`` are what the collector brought back (redacted) from
the simulated Atlas 800 A2 node of the main job (``scripts/local-deploy.sh``): ``a2-healthy``
right after the deploy, ``a2-faults`` after the faults of
``tests/integration/test_local_deploy.py`` were
planted (journal cut to its last lines). Each other fault is the healthy recording with the one
output changed that the fault changes, as the vendor tool or the role would print it. The SSH
tests run paramiko against an SSH server in this process (paramiko's server side, a real key
exchange and host key), which executes commands through ``/bin/sh -c`` as sshd does.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import json
import os
import queue
import re
import socket
import subprocess
import sys
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest
import typer
from paramiko.common import (
    AUTH_FAILED,
    AUTH_SUCCESSFUL,
    OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED,
    OPEN_SUCCEEDED,
)
from typer.testing import CliRunner

from ascend_serve.cli import doctor as doctor_cli
from ascend_serve.cli.doctor import doctor
from ascend_serve.doctor.bundle import write_bundle
from ascend_serve.doctor.checks_network import parse_link, parse_net_health, parse_tls
from ascend_serve.doctor.collected import (
    Collected,
    CollectError,
    collector_command,
    parse_collected,
    redact_sections,
)
from ascend_serve.doctor.diagnose import diagnose, examine, exit_code
from ascend_serve.doctor.findings import Context, Finding, HostResult
from ascend_serve.doctor.journal import classify_journal, latest_run
from ascend_serve.doctor.known_problems import KNOWN_PROBLEMS
from ascend_serve.doctor.redact import REDACTED, redact
from ascend_serve.doctor.remote import (
    AuthError,
    HostKeyError,
    LocalTransport,
    SSHTarget,
    SSHTransport,
    TransportError,
    command_text,
    fingerprint,
)
from ascend_serve.node import doctor_collect
from ascend_serve.stack.matrix import load_matrix

DATA = Path(__file__).parents[1] / "data" / "doctor"
MATRIX = load_matrix()
runner = CliRunner()

Sections = dict[str, dict[str, Any]]


def recording(name: str) -> Sections:
    data: Sections = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
    return data


def run_checks(sections: Sections) -> list[Finding]:
    return diagnose(Collected(host="node", sections=redact_sections(sections)),
                    Context(matrix=MATRIX))


def problems(findings: list[Finding]) -> set[str]:
    """Ids of findings at warning level or above."""
    return {f.id for f in findings if f.severity != "info"}


def by_id(findings: list[Finding], pid: str) -> Finding:
    matches = [f for f in findings if f.id == pid]
    assert matches, f"no {pid} among {[f.id for f in findings]}"
    return matches[0]


def app() -> typer.Typer:
    """The command as cli.py registers it."""
    application = typer.Typer()
    application.command("doctor")(doctor)
    return application


class ReplayTransport:
    """A transport that answers the collector's command with a recording."""

    def __init__(self, sections: Sections, name: str = "node") -> None:
        self.sections = sections
        self._name = name
        self.commands: list[Any] = []

    @property
    def name(self) -> str:
        return self._name

    def run(self, command: Any, timeout: float = 0) -> tuple[int, str, str]:
        self.commands.append(command)
        return 0, json.dumps({"format": doctor_collect.FORMAT, "host": self._name,
                              "sections": self.sections}), ""

    def read_file(self, path: str) -> str | None:
        return None

    def close(self) -> None:
        return None


# --- the recordings of the simulated node ---------------------------------------------------------


def test_healthy_node_has_no_finding_at_warning_level() -> None:
    findings = run_checks(recording("a2-healthy"))
    assert problems(findings) == set(), [f.model_dump() for f in findings]
    # What a container cannot do is reported, but only as information.
    assert {f.id for f in findings} == {"reboot-pending", "sysctl-not-applied", "collect-partial"}
    assert exit_code([HostResult(report_of(findings), None)]) == 0


def report_of(findings: list[Finding]) -> Any:
    from ascend_serve.doctor.findings import HostReport

    return HostReport(host="node", collected=True, findings=findings)


PLANTED = {
    "npu-unhealthy": "NPU 3 chip 0: Alarm",
    "hccn-link-down": "device 3, 5",
    "hccn-net-health": "device 3, 5",
    "driver-install-failed": "kernel headers",
    "kernel-headers-missing": "6.18",
    "service-oom": "out of memory",
    "service-failed": "auto-restart",
    "hccl-timeout-invalid": "HCCL_CONNECT_TIMEOUT=30",
    "set-env-not-sourced": "set_env.sh",
    "driver-version-mismatch":
        "driver 24.1.0, set vllm-ascend-0.13.0 supports HDK 25.5, 25.3, 25.2, 25.0",
}


def test_every_planted_fault_is_found_with_its_remedy() -> None:
    findings = run_checks(recording("a2-faults"))
    assert problems(findings) == set(PLANTED)
    for pid, detail in PLANTED.items():
        found = by_id(findings, pid)
        assert detail in found.detail, found.detail
        assert found.remedy == KNOWN_PROBLEMS[pid].remedy
        assert found.evidence
    assert any("NPU out of memory" in line for line in by_id(findings, "service-oom").evidence)
    assert any("install failed" in line for line in
               by_id(findings, "driver-install-failed").evidence)
    # The traceback lines around the OOM belong to it, not to a separate warning.
    assert "service-errors" not in {f.id for f in findings}
    assert exit_code([HostResult(report_of(findings), None)]) == 1


def test_findings_come_worst_first_and_cover_the_guides_faq() -> None:
    findings = run_checks(recording("a2-faults"))
    order = [f.severity for f in findings]
    assert order == sorted(order, key=["error", "warning", "info"].index)
    sources = " ".join(KNOWN_PROBLEMS[f.id].source for f in findings)
    for faq in ("FAQ 1", "FAQ 2", "FAQ 3"):
        assert faq in sources


# --- one fault at a time -------------------------------------------------------------------------


def _set_text(sections: Sections, name: str, text: str | None) -> None:
    sections[name] = {**sections.get(name, {"path": name}), "text": text}
    if text is None:
        sections[name]["error"] = "No such file or directory"


def _set_cmd(sections: Sections, name: str, rc: int, out: str, err: str = "") -> None:
    sections[name] = {**sections.get(name, {"argv": [name]}), "rc": rc, "out": out, "err": err}


def _edit_fact(sections: Sections, name: str, **values: Any) -> None:
    data = json.loads(sections[f"fact:{name}"]["text"])
    data.update(values)
    sections[f"fact:{name}"]["text"] = json.dumps(data)


def _sub(sections: Sections, name: str, key: str, pattern: str, replacement: str) -> None:
    text, count = re.subn(pattern, replacement, sections[name][key], count=1, flags=re.M)
    assert count == 1, f"{pattern!r} not in {name}"
    sections[name][key] = text


def _journal_add(sections: Sections, *lines: str) -> None:
    sections["journal"]["out"] += "".join(
        f"2026-12-03T18:00:00+0000 ascend-local-a2 {line}\n" for line in lines)


def _npu_launcher(sections: Sections, visible: str = "0") -> None:
    """The service moved to the NPUs: the serving environment of an ascend set."""
    _edit_fact(sections, "ascend_python_env", platform="ascend")
    _sub(sections, "launcher", "text", r"^# The profile's environment\.$",
         f"# The profile's environment.\nexport ASCEND_RT_VISIBLE_DEVICES={visible}")


def _sources_a_missing_set_env(sections: Sections) -> None:
    _sub(sections, "launcher", "text", r"^set -eo pipefail$",
         "set -eo pipefail\nsource /usr/local/Ascend/ascend-toolkit/set_env.sh")
    sections["launcher.sourced"]["value"]["/usr/local/Ascend/ascend-toolkit/set_env.sh"] = False


def _ray_on_npus(sections: Sections) -> None:
    _npu_launcher(sections)
    _sub(sections, "launcher", "text", r"--distributed-executor-backend uni",
         "--distributed-executor-backend ray")


def _swappiness_changed(sections: Sections) -> None:
    _edit_fact(sections, "ascend_host_tuning", sysctl={"applied": {"vm.swappiness": "0"}})
    _set_text(sections, "sysctl:vm.swappiness", "60\n")


def _governor_changed(sections: Sections) -> None:
    _edit_fact(sections, "ascend_host_tuning",
               cpu_governor={"applied": True, "wanted": "performance"})
    sections["cpu.governors"]["value"] = {
        "/sys/devices/system/cpu/cpufreq/policy0/scaling_governor": "powersave"}


def _process_row(sections: Sections) -> None:
    _sub(sections, "npu-smi.info", "out", r"^\| No running processes found in NPU 0\s+\|$",
         "| 0       0                 | 4242          | python3                  | 3100"
         "                    |")


FAULTS: dict[str, tuple[Callable[[Sections], None], str]] = {
    "npu-device-busy": (lambda s: _set_cmd(
        s, "npu-smi.info", 1, "", "dcmi module initialize failed. ret is -8005\n"), "-8005"),
    "npu-smi-failed": (lambda s: _set_cmd(s, "npu-smi.info", 1, "", "Segmentation fault\n"),
                       "exit 1"),
    "npu-held-by-other": (_process_row, "1 process"),
    "npu-unsupported": (lambda s: s["pci.huawei"].update(value=[
        {**d, "device": "0xd801"} if d["class"] == "0x120000" else d
        for d in s["pci.huawei"]["value"]]), "910 / 910 Pro B"),
    "npu-unhealthy": (lambda s: _sub(s, "npu-smi.info", "out", r"^(\| 1\s+910B1\s+\| )OK(\s+)",
                                     r"\1Critical\2"), "NPU 1 chip 0: Critical"),
    "driver-version-mismatch": (lambda s: _sub(s, "driver.version_info", "text",
                                               r"^Version=.*$", "Version=24.1.0"),
                                "driver 24.1.0"),
    "firmware-version-mismatch": (lambda s: _sub(s, "firmware", "out", r'"version":"[^"]+"',
                                                 '"version":"7.7.0.1.100"'), "7.7.0.1.100"),
    "cann-version-mismatch": (lambda s: _sub(
        s, "kernels.info:/usr/local/Ascend/cann-8.5.0", "text", r"^version_dir=.*$",
        "version_dir=8.3.RC2"), "kernels/ops 8.3.RC2"),
    "python-env-mismatch": (lambda s: _sub(s, "python_env", "out", r'"vllm": "0.32.0\+cpu"',
                                           '"vllm": "0.31.0+cpu"'), "vllm 0.31.0+cpu"),
    "stack-set-mixed": (lambda s: _edit_fact(s, "ascend_python_env", platform="ascend",
                                             stack_set="vllm-ascend-0.11.0"),
                        "vllm-ascend-0.11.0"),
    "stack-set-unknown": (lambda s: _edit_fact(s, "ascend_npu_driver",
                                               stack_set="vllm-ascend-9.9.9"),
                          "vllm-ascend-9.9.9"),
    "set-env-not-sourced": (lambda s: _npu_launcher(s), "CANN toolkit"),
    "set-env-missing": (_sources_a_missing_set_env, "/usr/local/Ascend/ascend-toolkit/set_env.sh"),
    "hccn-link-down": (lambda s: _set_cmd(s, "hccn:2:link", 0, "link status: DOWN\n"),
                       "device 2"),
    "hccn-net-health": (lambda s: _set_cmd(s, "hccn:6:net_health", 0,
                                           "net health status: Socket fail\n"), "device 6"),
    "hccn-tls-mixed": (lambda s: _set_cmd(s, "hccn:1:tls", 0,
                                          "dev_id:1, tls switch[1](0:disable, 1:enable)\n"),
                       "TLS"),
    "hccn-unreadable": (lambda s: _set_cmd(s, "hccn:4:link", 255, "",
                                           "hccn_tool: device 4 is invalid\n"), "1 hccn_tool"),
    "hccl-timeout-invalid": (lambda s: _sub(s, "hccl.env", "text", r"^HCCL_CONNECT_TIMEOUT=.*$",
                                            "HCCL_CONNECT_TIMEOUT=9000"), "9000"),
    "hccl-if-ip-absent": (lambda s: _sub(s, "hccl.env", "text", r"^HCCL_IF_IP=.*$",
                                         "HCCL_IF_IP=192.0.2.77"), "192.0.2.77"),
    "hccl-ifname-absent": (lambda s: _sub(s, "hccl.env", "text", r"^HCCL_SOCKET_IFNAME=.*$",
                                          "HCCL_SOCKET_IFNAME=ens9f0"), "no such interface"),
    "hccl-intra-both": (lambda s: _sub(s, "hccl.env", "text", r"^HCCL_INTRA_ROCE_ENABLE=.*$",
                                       "HCCL_INTRA_ROCE_ENABLE=1"), "both"),
    "hccl-env-missing": (lambda s: _set_text(s, "hccl.env", None), "No such file"),
    "hccl-timeout-in-log": (lambda s: _journal_add(
        s, "launch.sh[12081]: [ERROR] HCCL(12081,python3): EI0006: Getting socket times out. "
           "Reason: Get_Socket_Timeout, remote rank 9"), "shows it"),
    "host-oom-kill": (lambda s: _journal_add(
        s, "systemd[1]: ascend-vllm.service: A process of this unit has been killed by the OOM "
           "killer."), "OOM killer"),
    "service-oom": (lambda s: _journal_add(
        s, "launch.sh[12081]: torch.OutOfMemoryError: NPU out of memory. Tried to allocate "
           "1.50 GiB"), "out of memory"),
    "visible-devices-invalid": (lambda s: _npu_launcher(s, visible="0,9"), "beyond"),
    "ray-visible-devices": (_ray_on_npus, "Ray"),
    "service-failed": (lambda s: _sub(s, "unit.show", "out", r"^ActiveState=.*$",
                                      "ActiveState=failed"), "failed"),
    "service-unhealthy": (lambda s: s["service.health"].update(
        value={"url": "http://127.0.0.1:8000/health", "status": 503}), "503"),
    "service-missing": (lambda s: _sub(s, "unit.show", "out", r"^LoadState=.*$",
                                       "LoadState=not-found"), "not installed"),
    "service-errors": (lambda s: _journal_add(
        s, "launch.sh[12081]: (APIServer pid=12081) ERROR 12-03 18:00:00 [serving.py:1] "
           "unexpected failure"), "1 error line"),
    "swap-inactive": (lambda s: _edit_fact(s, "ascend_swap", size_gb=64, active=True),
                      "/swapfile"),
    "sysctl-drift": (_swappiness_changed, "vm.swappiness = 60"),
    "governor-drift": (_governor_changed, "not performance"),
    "jemalloc-missing": (lambda s: s["jemalloc"]["value"].update(exists=False), "libjemalloc"),
    "kernel-headers-missing": (lambda s: s["kernel.build_dir"]["value"].update(exists=False),
                               "6.18"),
    "driver-install-failed": (lambda s: _set_text(
        s, "install_log", s["install_log"]["text"] + "[2026-12-03 18:00:00][driver][25.5.0] "
        "install failed: the driver build needs dkms; install them and run again\n"),
        "failed"),
}


@pytest.mark.parametrize("pid", sorted(FAULTS))
def test_each_fault_is_found_with_its_remedy(pid: str) -> None:
    healthy = recording("a2-healthy")
    assert pid not in {f.id for f in run_checks(healthy)}  # the check can fail both ways
    mutate, detail = FAULTS[pid]
    sections = copy.deepcopy(healthy)
    mutate(sections)
    findings = run_checks(sections)
    found = by_id(findings, pid)
    assert detail in found.detail + " ".join(found.evidence), found.model_dump()
    assert found.remedy == KNOWN_PROBLEMS[pid].remedy and found.remedy
    assert found.severity == KNOWN_PROBLEMS[pid].severity
    assert found.host == "node"


def test_a_server_in_a_container_sources_the_images_set_env() -> None:
    """vllm_service_runtime: container: the launcher's set_env scripts are the image's, so the
    host lacking one is no finding; an env file it sources is mounted from the host, and the
    host lacking that still is."""
    sections = copy.deepcopy(recording("a2-healthy"))
    _sources_a_missing_set_env(sections)
    assert "set-env-missing" in {f.id for f in run_checks(sections)}
    _edit_fact(sections, "ascend_vllm_service", runtime="container",
               image="registry.example:5000/ascend/vllm-ascend:v0.13.0")
    assert "set-env-missing" not in {f.id for f in run_checks(sections)}
    sections["launcher.sourced"]["value"]["/etc/ascend-serve/hccl.env"] = False
    found = by_id(run_checks(sections), "hccl-env-missing")
    assert "/etc/ascend-serve/hccl.env" in found.detail


def test_every_known_problem_has_a_test_or_a_recording() -> None:
    covered = set(FAULTS) | set(PLANTED) | {"reboot-pending", "sysctl-not-applied",
                                             "collect-partial", "not-provisioned",
                                             "swap-not-applied",
                                             # per-fault remedy and severity: its own tests in
                                             # tests/cli/test_doctor_explain.py
                                             "fault-code"}
    assert set(KNOWN_PROBLEMS) <= covered, set(KNOWN_PROBLEMS) - covered


def test_a_version_file_in_an_unknown_layout_is_named_not_taken_for_missing() -> None:
    """The vendor's files are read by ascend_files (the real layouts); an unknown one is said."""
    sections = recording("a2-healthy")
    _set_text(sections, "nnal.version_info", "version=8.5.0\npackage_name=Ascend-cann-nnal\n")
    found = [f for f in run_checks(sections) if f.id == "cann-version-mismatch"]
    assert len(found) == 1 and "NNAL (ATB) missing" in found[0].detail
    assert any("nnal/atb/latest/version.info: line 1 'version=8.5.0'" in line
               for line in found[0].evidence), found[0].evidence


def test_swap_the_host_refuses_is_information_only() -> None:
    sections = recording("a2-healthy")
    _edit_fact(sections, "ascend_swap", size_gb=64, active=False,
               reason="no CAP_SYS_ADMIN in the effective capability set")
    findings = run_checks(sections)
    assert by_id(findings, "swap-not-applied").severity == "info"
    assert problems(findings) == set()


def test_a_driver_install_that_failed_then_succeeded_is_no_finding() -> None:
    sections = recording("a2-healthy")
    log = sections["install_log"]["text"]
    _set_text(sections, "install_log",
              log + "[2026-12-03 18:00:00][driver][25.5.0] install failed: the driver build "
                    "needs dkms\n[2026-12-03 18:05:00][driver][25.5.0] install start\n"
                    "[2026-12-03 18:05:01][driver][25.5.0] install success\n")
    assert "driver-install-failed" not in {f.id for f in run_checks(sections)}


def test_an_oom_of_an_earlier_start_is_not_reported_after_a_good_restart() -> None:
    sections = recording("a2-healthy")
    lines = sections["journal"]["out"].splitlines()
    start = next(i for i, line in enumerate(lines) if "systemd[1]: Starting " in line)
    earlier = ["2026-12-03T17:40:00+0000 ascend-local-a2 launch.sh[1]: RuntimeError: NPU out of "
               "memory. Tried to allocate 2.00 GiB"]
    sections["journal"]["out"] = "\n".join(lines[:start] + earlier + lines[start:]) + "\n"
    assert "service-oom" not in {f.id for f in run_checks(sections)}
    assert latest_run(sections["journal"]["out"])[0].endswith(
        "Starting ascend-vllm.service - vLLM: tiny-deepseek-v3 (tiny-deepseek-v3)...")


def test_output_logged_before_systemds_start_line_belongs_to_that_start() -> None:
    """Seen in the main job under load: journald put the failing server's output (same second)
    before systemd's "Starting" line of its start; it is that start's output all the same."""
    journal = (
        "2026-12-04T22:01:20+0000 n launch.sh[10205]: INFO:     Shutting down\n"
        "2026-12-04T22:01:28+0000 n systemd[1]: Stopped ascend-vllm.service - vLLM.\n"
        "2026-12-04T22:01:28+0000 n oom.sh[17493]: RuntimeError: NPU out of memory. Tried to "
        "allocate 2.00 GiB\n"
        "2026-12-04T22:01:28+0000 n systemd[1]: Starting ascend-vllm.service - vLLM...\n"
        "2026-12-04T22:01:28+0000 n systemd[1]: Started ascend-vllm.service - vLLM.\n"
        "2026-12-04T22:01:28+0000 n systemd[1]: ascend-vllm.service: Main process exited, "
        "code=exited, status=1/FAILURE\n")
    run = latest_run(journal)
    assert run[0].endswith("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB")
    assert len(run) == 4
    assert "service-oom" in classify_journal(run)


def test_what_a_user_without_rights_cannot_read_is_said() -> None:
    sections = recording("a2-healthy")
    _set_cmd(sections, "journal", 0, "", "Hint: You are currently not seeing messages from other "
             "users and the system.\n")
    _set_text(sections, "launcher", None)
    sections["launcher"]["error"] = "Permission denied"
    partial = by_id(run_checks(sections), "collect-partial")
    assert partial.evidence == ["journal: permission denied", "launcher: permission denied",
                                "service.environ: permission denied"]


def test_an_empty_host_is_not_provisioned() -> None:
    findings = run_checks({"facts_dir": {"value": {"path": "/etc/ansible/facts.d",
                                                   "exists": False, "names": []}}})
    assert problems(findings) == {"not-provisioned"}


def test_an_unknown_matrix_is_said_not_guessed() -> None:
    findings = diagnose(Collected("node", recording("a2-healthy")),
                        Context(matrix=None, matrix_error="cannot read"))
    assert by_id(findings, "stack-set-unknown").severity == "warning"
    assert "driver-version-mismatch" not in {f.id for f in findings}


HCCN_ANSWERS = [
    "link status: UP\n", "link status: DOWN\n", "Link State : down\n", "link:UP\n",
    "net health status: Success\n", "net_health_status: Fault\n",
    "Net Health Status : Socket fail\n", "dev_id:0, tls switch[1](0:disable, 1:enable)\n",
    "tls enable: 0\n", "no such answer\n",
]


@pytest.mark.parametrize("text", HCCN_ANSWERS)
def test_hccn_answers_read_as_the_roles_read_them(text: str) -> None:
    """doctor (installed without the collection) reads hccn_tool as module_utils/hccn does."""
    hccn = importlib.import_module(
        "ansible_collections.ascend_serve.fleet.plugins.module_utils.hccn")
    for ours, theirs in ((parse_link, hccn.parse_link), (parse_net_health, hccn.parse_net_health),
                         (parse_tls, hccn.parse_tls)):
        try:
            expected: object = theirs(text)
        except hccn.HccnParseError:
            expected = None
        assert ours(text) == expected, (ours.__name__, text)


# --- redaction ---------------------------------------------------------------------------------

SECRETS = {
    "env": ("VLLM_API_KEY=sk-live-0123456789abcdef\nHCCL_IF_IP=10.0.0.1\n",
            "sk-live-0123456789abcdef"),
    "export": ("export HF_TOKEN='hf_abcdefABCDEF123456'\n", "hf_abcdefABCDEF123456"),
    "header": ("curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig' http://x\n",
               "eyJhbGciOiJIUzI1NiJ9.payload.sig"),
    "json": ('{"api_key": "k3y-in-json-000111", "url": "http://n:8000"}',
             "k3y-in-json-000111"),
    "yaml": ("ansible_become_password: Corr3ct-Horse-Battery\n", "Corr3ct-Horse-Battery"),
    "quoted": ('db_password="p@ss word with spaces"\n', "p@ss word with spaces"),
    "flag": ("vllm serve /m --api-key s3cr3t-flag-value --port 8000\n", "s3cr3t-flag-value"),
    "url": ("index-url = https://builder:Pip-Passw0rd@mirror.example/simple\n", "Pip-Passw0rd"),
    "vault": ("vault_vllm_service_api_key: !vault |\n          $ANSIBLE_VAULT;1.1;AES256\n"
              "          62313365396662343061393464336163383764373764613633653634306231386433\n"
              "          6134333665353966363534333632666535333761666131620a663537646436643839\n",
              "62313365396662343061393464336163383764373764613633653634306231386433"),
    "pem": ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9u\n"
            "-----END OPENSSH PRIVATE KEY-----\n", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9u"),
}


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_redaction_removes_the_secret_and_keeps_the_name(kind: str) -> None:
    text, secret = SECRETS[kind]
    cleaned = redact(text)
    assert secret not in cleaned
    assert REDACTED in cleaned
    assert redact(cleaned) == cleaned  # idempotent


def test_redaction_leaves_ordinary_settings_alone() -> None:
    text = ("--max-num-batched-tokens 4096 --max-model-len 32768\nTOKENIZERS_PARALLELISM=false\n"
            'HCCL_CONNECT_TIMEOUT=120\n{"api_key": false, "token": null}\n'
            "npu-smi 25.5.0 Version: 25.5.0\n")
    assert redact(text) == text


def test_the_support_bundle_holds_everything_collected_and_no_secret(tmp_path: Path) -> None:
    raw = copy.deepcopy(recording("a2-faults"))
    # Secrets as the host would hand them over, before any redaction.
    raw["unit.envfile:/etc/ascend-serve/vllm/api-key.env"] = {
        "path": "/etc/ascend-serve/vllm/api-key.env", "text": SECRETS["env"][0]}
    raw["service.environ"] = {"value": "PATH=/usr/bin\n" + SECRETS["env"][0]}
    raw["journal"]["out"] += "x launch.sh[1]: " + SECRETS["header"][0]
    raw["fact:site"] = {"path": "/etc/ansible/facts.d/site.fact", "text": SECRETS["vault"][0]}
    raw["hccn.conf"]["text"] += SECRETS["pem"][0]
    transport = ReplayTransport(raw)
    result = examine("node", lambda: transport, ["python3", "-c", "..."], Context(MATRIX))
    assert result.collected is not None
    bundle = tmp_path / "support.tar.gz"
    write_bundle(bundle, [result])
    assert oct(bundle.stat().st_mode & 0o777) == "0o600"
    with tarfile.open(bundle) as tar:
        members = {m.name: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
                   for m in tar.getmembers() if m.isfile()}
    names = set(members)
    assert {"support/report.json", "support/node/findings.json", "support/node/collected.json",
            "support/node/commands/journal.txt", "support/node/commands/npu-smi.info.txt",
            "support/node/facts/ascend_npu_driver.fact",
            "support/node/files/etc_ascend-serve_hccl.env",
            "support/node/files/etc_ascend-serve_vllm_api-key.env"} <= names
    everything = "\n".join(members.values())
    for _, secret in SECRETS.values():
        assert secret not in everything
    key_file = members["support/node/files/etc_ascend-serve_vllm_api-key.env"]
    assert key_file == "VLLM_API_KEY=<redacted>\nHCCL_IF_IP=10.0.0.1\n"
    assert "HCCL_CONNECT_TIMEOUT=30" in members["support/node/files/etc_ascend-serve_hccl.env"]
    assert "NPU out of memory" in members["support/node/commands/journal.txt"]
    findings = json.loads(members["support/node/findings.json"])["findings"]
    assert set(PLANTED) <= {f["id"] for f in findings}


# --- collection --------------------------------------------------------------------------------


def test_the_collector_is_python_37_and_sent_as_one_argument() -> None:
    import ast

    source = Path(doctor_collect.__file__).read_text(encoding="utf-8")
    ast.parse(source, feature_version=(3, 7))
    argv = collector_command("python3", facts_dir="/x y", journal_lines=50, sudo=True)
    assert argv[:5] == ["sudo", "-n", "--", "python3", "-c"]
    assert argv[5] == source
    assert argv[6:] == ["--facts-dir=/x y", "--journal-lines=50"]


@pytest.mark.parametrize(("rc", "out", "err", "message"), [
    (127, "", "sh: 1: python3: not found", "is python3 installed"),
    (1, "", "sudo: a password is required", "NOPASSWD"),
    (0, "Traceback: boom", "", "exit 0"),
    (0, '{"format": 99, "sections": {}}', "", "unknown format"),
    (0, '{"format": 1}', "", "no sections"),
])
def test_a_collector_that_did_not_answer_is_a_collection_failure(
        rc: int, out: str, err: str, message: str) -> None:
    with pytest.raises(CollectError, match=re.escape(message)):
        parse_collected("node", rc, out, err)


def _fake_tool(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(0o755)


def test_the_collector_reads_what_the_facts_point_at(tmp_path: Path) -> None:
    """The real collector, here: facts name the install path, env, launcher and devices."""
    healthy = recording("a2-healthy")
    base = tmp_path / "Ascend"
    (base / "driver").mkdir(parents=True)
    (base / "driver" / "version.info").write_text("Version=25.5.0\n", encoding="utf-8")
    _fake_tool(base / "driver" / "tools" / "hccn_tool",
               'case "$3" in -link) echo "link status: UP";; '
               '-net_health) echo "net health status: Success";; '
               '*) echo "dev_id:$2, tls switch[0](0:disable, 1:enable)";; esac\n')
    bin_dir = tmp_path / "bin"
    (tmp_path / "smi.txt").write_text(healthy["npu-smi.info"]["out"], encoding="utf-8")
    _fake_tool(bin_dir / "npu-smi", f'[ "$1" = info ] && exec cat {tmp_path / "smi.txt"}\n')
    launcher = tmp_path / "launch.sh"
    launcher.write_text(f"#!/bin/bash\nsource {base}/nnal/atb/set_env.sh\n"
                        f". {tmp_path / 'hccl.env'}\nexec vllm serve /m\n", encoding="utf-8")
    (tmp_path / "hccl.env").write_text("HCCL_CONNECT_TIMEOUT=120\n", encoding="utf-8")
    facts = tmp_path / "facts"
    facts.mkdir()
    for name, data in {
        "ascend_npu_driver": {"install_path": str(base), "stack_set": "vllm-ascend-0.13.0"},
        "ascend_python_env": {"python": sys.executable, "packages": {"pytest": "0"}},
        "ascend_npu_network": {"devices": [{"device": 0}, {"device": 1}]},
        "ascend_hccl": {"env_file": str(tmp_path / "hccl.env")},
        "ascend_vllm_service": {"unit": "ascend-doctor-test-none", "launcher": str(launcher)},
    }.items():
        (facts / f"{name}.fact").write_text(json.dumps(data), encoding="utf-8")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "-c", Path(doctor_collect.__file__).read_text(),
                           f"--facts-dir={facts}"], capture_output=True, text=True, env=env,
                          check=False, timeout=120)
    collected = parse_collected("here", done.returncode, done.stdout, done.stderr)
    sections = collected.sections
    assert collected.text("driver.version_info") == "Version=25.5.0\n"
    assert sections["npu-smi.info"]["rc"] == 0 and "910B1" in sections["npu-smi.info"]["out"]
    assert sections["hccn:1:link"]["argv"][1:] == ["-i", "1", "-link", "-g"]
    assert sections["hccn:1:link"]["out"] == "link status: UP\n"
    assert sections["hccn:0:tls"]["out"].startswith("dev_id:0, tls switch[0]")
    versions = json.loads(sections["python_env"]["out"])
    assert versions["dists"]["pytest"] == pytest.__version__
    assert versions["python"] == ".".join(map(str, sys.version_info[:3]))
    assert collected.value("launcher.sourced") == {
        f"{base}/nnal/atb/set_env.sh": False, str(tmp_path / "hccl.env"): True}
    assert collected.text("hccl.env") == "HCCL_CONNECT_TIMEOUT=120\n"


# --- transports ---------------------------------------------------------------------------------


def test_local_transport_runs_an_argument_list_without_a_shell() -> None:
    transport = LocalTransport()
    rc, out, _ = transport.run(["printf", "%s|", "a b", "$(id)", "it's", ";rm -rf /"])
    assert (rc, out) == (0, "a b|$(id)|it's|;rm -rf /|")
    assert transport.run(["/nonexistent/tool"])[0] == 127
    assert transport.run("exit 3")[0] == 3
    assert transport.read_file("/nonexistent/file") is None


def test_command_text_quotes_every_argument() -> None:
    argv = ["printf", "%s|", "a b", "$(id)", "it's", "`x`", ";", ""]
    text = command_text(argv)
    done = subprocess.run(["/bin/sh", "-c", text], capture_output=True, text=True, check=True)
    assert done.stdout == "a b|$(id)|it's|`x`|;||"


@pytest.mark.parametrize(("text", "host", "user", "port"), [
    ("node1", "node1", None, 22),
    ("root@10.0.0.5", "10.0.0.5", "root", 22),
    ("ops@node1:2222", "node1", "ops", 2222),
    ("[fe80::1]:2200", "fe80::1", None, 2200),
    ("fe80::1", "fe80::1", None, 22),
])
def test_ssh_targets(text: str, host: str, user: str | None, port: int) -> None:
    target = SSHTarget.parse(text)
    assert (target.host, target.user, target.port) == (host, user, port)


@pytest.mark.parametrize("text", ["", "a b", "node:0", "node:99999", "node:x", "root@"])
def test_bad_ssh_targets(text: str) -> None:
    with pytest.raises(ValueError):
        SSHTarget.parse(text)


class _Server(paramiko.ServerInterface):
    def __init__(self, client_key: paramiko.PKey) -> None:
        self.client_key = client_key
        self.requests: queue.Queue[tuple[paramiko.Channel, bytes]] = queue.Queue()

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        ok = username == "doctor" and key.asbytes() == self.client_key.asbytes()
        return AUTH_SUCCESSFUL if ok else AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return (OPEN_SUCCEEDED if kind == "session"
                else OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED)

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        self.requests.put((channel, command))
        return True


class SSHServer:
    """An SSH server in this process: one host key, public-key auth, exec via /bin/sh -c."""

    def __init__(self, tmp: Path) -> None:
        self.host_key = paramiko.ECDSAKey.generate()
        self.client_key = paramiko.ECDSAKey.generate()
        self.client_key_file = tmp / "id_ecdsa"
        self.client_key.write_private_key_file(str(self.client_key_file))
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.commands: list[str] = []
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def target(self) -> SSHTarget:
        return SSHTarget("127.0.0.1", "doctor", self.port)

    def known_hosts_line(self, key: paramiko.PKey | None = None) -> str:
        key = key or self.host_key
        return f"[127.0.0.1]:{self.port} {key.get_name()} {key.get_base64()}\n"

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._session, args=(conn,), daemon=True).start()

    def _session(self, conn: socket.socket) -> None:
        transport = paramiko.Transport(conn)
        transport.add_server_key(self.host_key)
        server = _Server(self.client_key)
        try:
            transport.start_server(server=server)
            while transport.is_active():  # one exec request per channel, as many as asked
                try:
                    channel, raw = server.requests.get(timeout=0.2)
                except queue.Empty:
                    continue
                command = raw.decode()
                self.commands.append(command)
                done = subprocess.run(["/bin/sh", "-c", command], capture_output=True,
                                      check=False)
                channel.sendall(done.stdout)
                channel.sendall_stderr(done.stderr)
                channel.send_exit_status(done.returncode)
                channel.close()
        except (paramiko.SSHException, EOFError, OSError):
            return
        finally:
            with contextlib.suppress(Exception):
                transport.close()

    def close(self) -> None:
        self._stop = True
        self.sock.close()


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SSHServer]:
    server = SSHServer(tmp_path)
    yield server
    server.close()


def test_ssh_to_a_known_host_runs_quoted_commands(sshd: SSHServer, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line(), encoding="utf-8")
    transport = SSHTransport(sshd.target, known_hosts=known, identity=sshd.client_key_file)
    try:
        rc, out, err = transport.run(["printf", "%s|", "a b", "$(id)", "it's", ";false"])
        assert (rc, out, err) == (0, "a b|$(id)|it's|;false|", "")
        assert transport.run(["sh", "-c", "echo oops >&2; exit 4"]) == (4, "", "oops\n")
        assert transport.read_file(str(known)) == known.read_text(encoding="utf-8")
    finally:
        transport.close()
    assert sshd.commands[0] == "printf '%s|' 'a b' '$(id)' 'it'\"'\"'s' ';false'"


def test_ssh_refuses_an_unknown_host_and_changes_nothing(sshd: SSHServer, tmp_path: Path
                                                         ) -> None:
    known = tmp_path / "known_hosts"
    other = paramiko.ECDSAKey.generate()
    known.write_text(f"other.example {other.get_name()} {other.get_base64()}\n",
                     encoding="utf-8")
    before = known.read_text(encoding="utf-8")
    with pytest.raises(HostKeyError) as caught:
        SSHTransport(sshd.target, known_hosts=known, identity=sshd.client_key_file)
    message = str(caught.value)
    assert "is not in" in message and fingerprint(sshd.host_key) in message
    assert "--accept-unknown-host" in message
    assert known.read_text(encoding="utf-8") == before
    assert sshd.commands == []


def test_ssh_accepts_an_unknown_host_only_when_told_and_records_it(sshd: SSHServer,
                                                                    tmp_path: Path) -> None:
    known = tmp_path / "new" / "known_hosts"
    warnings: list[str] = []
    transport = SSHTransport(sshd.target, known_hosts=known, accept_unknown_host=True,
                             identity=sshd.client_key_file, warn=warnings.append)
    assert transport.run(["true"])[0] == 0
    transport.close()
    assert len(warnings) == 1 and fingerprint(sshd.host_key) in warnings[0]
    assert sshd.host_key.get_base64() in known.read_text(encoding="utf-8")
    # Now known: a strict connection works.
    SSHTransport(sshd.target, known_hosts=known, identity=sshd.client_key_file).close()


def test_ssh_refuses_a_changed_host_key_even_when_accepting_unknown(sshd: SSHServer,
                                                                    tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line(paramiko.ECDSAKey.generate()), encoding="utf-8")
    with pytest.raises(HostKeyError, match="does not match"):
        SSHTransport(sshd.target, known_hosts=known, accept_unknown_host=True,
                     identity=sshd.client_key_file)


def test_ssh_authentication_failure_and_unreachable_host(sshd: SSHServer, tmp_path: Path
                                                         ) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line(), encoding="utf-8")
    stranger = tmp_path / "stranger"
    paramiko.ECDSAKey.generate().write_private_key_file(str(stranger))
    with pytest.raises(AuthError):
        SSHTransport(sshd.target, known_hosts=known, identity=stranger)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(TransportError, match="cannot connect"):
        SSHTransport(SSHTarget("127.0.0.1", "doctor", port), known_hosts=known,
                     identity=stranger, connect_timeout=5)


# --- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["node1", "--local"], "not both"),
    (["--bundle", "out.zip"], ".tar.gz"),
    (["--bundle", "/nonexistent-dir/x.tar.gz"], "does not exist"),
    (["no de"], "is not [user@]host[:port]"),
    (["node:70000"], "port"),
    (["node1", "--identity", "/nonexistent/key"], "not a file"),
    (["--matrix", "/nonexistent/matrix.yml"], "cannot read the version matrix"),
])
def test_bad_input_exits_2(args: list[str], message: str) -> None:
    result = runner.invoke(app(), args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_cli_json_and_bundle_from_a_replayed_host(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    monkeypatch.setattr(doctor_cli, "LocalTransport",
                        lambda: ReplayTransport(recording("a2-faults"), "local"))
    bundle = tmp_path / "b.tar.gz"
    result = runner.invoke(app(), ["--json", "--bundle", str(bundle)])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["exit_code"] == 1 and report["bundle"] == str(bundle)
    findings = report["hosts"][0]["findings"]
    assert set(PLANTED) <= {f["id"] for f in findings}
    assert all(f["remedy"] and f["evidence"] and f["host"] == "local" for f in findings)
    assert tarfile.is_tarfile(bundle)
    table = runner.invoke(app(), [])
    assert table.exit_code == 1
    assert "hccl-timeout-invalid" in table.stdout and "problems found" in table.stdout


def test_cli_healthy_host_exits_0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor_cli, "LocalTransport",
                        lambda: ReplayTransport(recording("a2-healthy"), "local"))
    result = runner.invoke(app(), ["--local"])
    assert result.exit_code == 0, result.output
    assert "no problems" in result.stdout


def test_cli_over_ssh_unknown_host_exits_3_known_host_is_examined(sshd: SSHServer,
                                                                 tmp_path: Path) -> None:
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("", encoding="utf-8")
    host = f"doctor@127.0.0.1:{sshd.port}"
    result = runner.invoke(app(), [host, "--known-hosts", str(empty), "-i",
                                   str(sshd.client_key_file), "--json"])
    assert result.exit_code == 3, result.output
    report = json.loads(result.stdout)["hosts"][0]
    assert report["collected"] is False and "is not in" in report["error"]
    # The real collector, over SSH, against this machine (not an ascend-serve node).
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_line(), encoding="utf-8")
    result = runner.invoke(app(), [host, "--known-hosts", str(known), "-i",
                                   str(sshd.client_key_file), "--json",
                                   "--remote-python", sys.executable,
                                   "--facts-dir", str(tmp_path / "no-facts")])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)["hosts"][0]
    assert report["collected"] is True
    assert "not-provisioned" in {f["id"] for f in report["findings"]}
    assert sshd.commands[-1].startswith(f"{sys.executable} -c ")


def test_hosts_are_examined_concurrently_and_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    from ascend_serve.doctor.diagnose import examine_all

    barrier = threading.Barrier(3, timeout=10)

    class Slow(ReplayTransport):
        def run(self, command: Any, timeout: float = 0) -> tuple[int, str, str]:
            barrier.wait()  # all three hosts are in here at once, or this times out
            return super().run(command, timeout)

    targets = [(name, (lambda n=name: Slow(recording("a2-healthy"), n)))
               for name in ("a", "b", "c")]
    results = examine_all(targets, ["python3"], Context(MATRIX))
    assert [r.report.host for r in results] == ["a", "b", "c"]
    assert all(r.report.collected for r in results)


def test_a_host_that_cannot_be_reached_makes_exit_3() -> None:
    def refuse() -> Any:
        raise TransportError("cannot connect to node: [Errno 111] Connection refused")

    result = examine("node", refuse, ["python3"], Context(MATRIX))
    assert not result.report.collected and "refused" in (result.report.error or "")
    assert exit_code([result]) == 3
