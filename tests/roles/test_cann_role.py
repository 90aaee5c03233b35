"""The cann role on this machine, in a mount namespace of its own: a first run installs and
writes the environment, a no-op re-run makes one remote module call (cann_facts), an edited
environment file is rewritten by a plain re-run, a deleted ledger is written again, verification
runs after a change or with the verify tag only, and check mode stays clean.

The installers are stand-ins (shell scripts) that write what the vendor's packages leave for the
role to read (versions, set_env.sh, the libraries); the install path is the test's directory.
/etc and /var are overlays whose writes stay in the test's directory, so the role writes its
profile script (which the verification's login shell sources), its environment file and its
ledger at their real paths without touching this machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import BIN, ENV
from paths import ROOT
from role_isolation import NEEDS_NAMESPACES, remote_actions, write_recorder

CANN, DRIVER = "8.5.0", "25.5.0"  # set vllm-ascend-0.13.0
OVERLAID = ("/etc", "/var")
PROFILE, ENV_FILE = "/etc/profile.d/ascend-cann.sh", "/etc/ascend-serve/cann.env"
LEDGER = "/etc/ansible/facts.d/ascend_cann.fact"
# Tasks a no-op run starts for the host (run_counts): the role's own (argument validation, the
# read, the plan, the checks, the plan shown, the skipped apply include, the skipped ledger, the
# skipped verification include; 20 before they were merged and put behind includes), plus fact
# gathering and the dependencies ascend_stack and ledger (9).
NOOP_ROLE_TASKS = 8
NOOP_TASKS = NOOP_ROLE_TASKS + 9



pytestmark = [
    NEEDS_NAMESPACES,
    # The steps share one host and run in order, as one test (pytest-xdist cannot split them).
    pytest.mark.xdist_group("cann_role"),
]


# Stand-ins of the three installers: --check passes; an install writes what the vendor's does
# for the role to read (sim/ascend_sim/devtools/installer.py, CANN 8.5 layout).
HEADER = ('#!/bin/bash\nfor a in "$@"; do case $a in --check) exit 0;; '
          '--install-path=*) P=${a#--install-path=};; esac; done\n')
TOOLKIT = f"$P/cann-{CANN}"
ATB = "$P/nnal/atb"
EXPORT = "printf 'export %s=%s\\n' "  # name, value
INSTALLERS = {
    "toolkit.run": [
        f"mkdir -p {TOOLKIT}/lib64 {TOOLKIT}/arch-linux {TOOLKIT}/opp",
        f"echo sim > {TOOLKIT}/lib64/libhccl.so",
        f"printf 'package_name=Ascend-cann-toolkit\\nversion={CANN}\\n' "
        f"> {TOOLKIT}/arch-linux/ascend_toolkit_install.info",
        f"{{ {EXPORT} ASCEND_TOOLKIT_HOME {TOOLKIT}",
        f'  {EXPORT} LD_LIBRARY_PATH "{TOOLKIT}/lib64:\\${{LD_LIBRARY_PATH:-}}"',
        f"}} > {TOOLKIT}/set_env.sh",
    ],
    "ops.run": [f"printf 'Version={CANN}.0.201\\nversion_dir={CANN}\\n' "
                f"> {TOOLKIT}/opp/version.info"],
    # NNAL installs with the toolkit's set_env.sh sourced.
    "nnal.run": [
        'test -n "$ASCEND_TOOLKIT_HOME" || exit 3',
        f"mkdir -p {ATB}/{CANN}/lib && echo sim > {ATB}/{CANN}/lib/libatb.so",
        f"printf '    Ascend-cann-atb : {CANN}\\n' > {ATB}/{CANN}/version.info",
        f"ln -sfn {CANN} {ATB}/latest",
        f"{{ {EXPORT} ATB_HOME_PATH {ATB}/latest",
        f'  {EXPORT} LD_LIBRARY_PATH "{ATB}/latest/lib:\\${{LD_LIBRARY_PATH:-}}"',
        f"}} > {ATB}/set_env.sh",
    ],
}


def _overlays(tmp: Path) -> list[str]:
    mounts = []
    for path in OVERLAID:
        layer = tmp / "overlay" / path.strip("/")
        mounts.append(f"mount -t overlay overlay -o lowerdir={path},"
                      f"upperdir={layer}/upper,workdir={layer}/work {path}")
    return mounts


@dataclass
class Host:
    tmp: Path
    # The run_counts callback's counts for the host of the last play (tasks, skipped, ...).
    counts: dict[str, int] = field(default_factory=dict)

    def play(self, *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
        """The role on the host (ansible-playbook args added); its task records."""
        record, counts = self.tmp / "record.jsonl", self.tmp / "counts.jsonl"
        record.unlink(missing_ok=True)
        counts.unlink(missing_ok=True)
        command = [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                   "-e", f"@{self.tmp / 'extra.yml'}", *args, str(self.tmp / "play.yml")]
        script = " && ".join([*_overlays(self.tmp), "exec " + shlex.join(command)])
        env = {**os.environ, **ENV, "TASK_RECORD": str(record),
               "ANSIBLE_CALLBACK_PLUGINS": str(self.tmp / "callbacks"),
               "ANSIBLE_CALLBACKS_ENABLED": "task_record,ascend_serve.fleet.run_counts",
               "ASCEND_SERVE_RUN_COUNTS": str(counts)}
        proc = subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=ROOT, env=env,
                              capture_output=True, text=True, check=False, timeout=600)
        lines = record.read_text().splitlines() if record.exists() else []
        self.counts = (json.loads(counts.read_text())["hosts"].get("localhost", {})
                       if counts.exists() else {})
        return proc, [json.loads(line) for line in lines]

    def inside(self, command: str) -> subprocess.CompletedProcess[str]:
        """A shell command in the host's overlays (to read a file, to plant drift)."""
        return subprocess.run(["unshare", "-m", "sh", "-c", " && ".join([*_overlays(self.tmp),
                                                                         command])],
                              capture_output=True, text=True, check=False, timeout=60)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Host:
    tmp = tmp_path_factory.mktemp("cann")
    base = tmp / "Ascend"
    (base / "driver").mkdir(parents=True)
    (base / "driver" / "version.info").write_text(f"Version={DRIVER}\n")
    artifacts = tmp / "artifacts"
    artifacts.mkdir()
    sha256 = {}
    for name, lines in INSTALLERS.items():
        (artifacts / name).write_text(HEADER + "\n".join(lines) + "\n")
        sha256[name] = hashlib.sha256((artifacts / name).read_bytes()).hexdigest()
    write_recorder(tmp)
    for path in OVERLAID:
        for part in ("upper", "work"):
            (tmp / "overlay" / path.strip("/") / part).mkdir(parents=True)
    (tmp / "play.yml").write_text(yaml.safe_dump([{
        "name": "CANN", "hosts": "localhost", "gather_facts": True, "gather_subset": ["min"],
        "roles": [{"role": "ascend_serve.fleet.cann", "tags": ["cann"]}],
    }]))
    (tmp / "extra.yml").write_text(yaml.safe_dump({
        "ansible_python_interpreter": sys.executable,
        "ascend_stack_set": "vllm-ascend-0.13.0",
        "ascend_stack_check_python": False,
        "cann_install_path": str(base),
        "cann_artifact_dir": str(artifacts),
        "cann_toolkit_file": "toolkit.run",
        "cann_kernels_file": "ops.run",
        "cann_nnal_file": "nnal.run",
        "cann_sha256": sha256,
    }))
    return Host(tmp)


def _ours(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["role"] == "cann"]


def _remote(records: list[dict[str, Any]]) -> list[str]:
    """The role's module runs on the host (tasks that ran and are not controller-only)."""
    return remote_actions(records, "cann")


def _changed(records: list[dict[str, Any]]) -> list[str]:
    return [r["action"].rsplit(".", 1)[-1] for r in records if r["changed"]]


def _out(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout[-6000:] + proc.stderr[-3000:]


# The tests run in order on one host: check mode on the fresh host, first converge, no-op re-run,
# drift, the verify tag.


def _check_mode_on_the_fresh_host_writes_nothing(host: Host) -> None:
    proc, records = host.play("--check", "--diff")
    assert proc.returncode == 0, _out(proc)
    assert "cann_facts" in _remote(records) and "template" not in _remote(records), _ours(records)
    assert host.inside(f"test ! -e {PROFILE} && test ! -e {ENV_FILE}").returncode == 0


def _first_run_installs_resolves_the_new_environment_and_verifies(host: Host) -> None:
    proc, records = host.play()
    assert proc.returncode == 0, _out(proc)
    # Read before the installers and again after them, then written and verified.
    assert _remote(records) == ["cann_facts", "cann_facts", "template", "file", "template",
                                "ledger", "command", "find"], _ours(records)
    env = host.inside(f"cat {ENV_FILE}").stdout
    atb = host.tmp / "Ascend/nnal/atb/latest"
    assert f"ASCEND_TOOLKIT_HOME={host.tmp}/Ascend/cann-{CANN}\n" in env, env
    assert f"ATB_HOME_PATH={atb}\n" in env, env
    assert f"LD_LIBRARY_PATH={atb}/lib:{host.tmp}/Ascend/cann-{CANN}/lib64:\n" in env, env
    assert "\nPWD=" not in env and "\nSHLVL=" not in env, env
    ledger = json.loads(host.inside(f"cat {LEDGER}").stdout)
    assert ledger["set_env"] == [f"{host.tmp}/Ascend/cann-{CANN}/set_env.sh",
                                 f"{host.tmp}/Ascend/nnal/atb/set_env.sh"], ledger
    assert any(r["status"] == "ok" and "environment sourced by login shells" in r["msg"]
               for r in _ours(records)), _ours(records)


def _a_no_op_re_run_makes_one_remote_call(host: Host) -> None:
    for args in ((), ("--check", "--diff")):
        proc, records = host.play(*args)
        assert proc.returncode == 0, _out(proc)
        assert _remote(records) == ["cann_facts"], (args, _ours(records))
        assert not _changed(records), (args, records)
        # Every task a host reaches costs the controller a worker, skipped or not: the apply and
        # verification sections are one skipped include each, the checks one skipped fail.
        assert len(_ours(records)) <= NOOP_ROLE_TASKS, (args, [r["task"] for r in _ours(records)])
        assert host.counts["tasks"] <= NOOP_TASKS, (args, host.counts)
        # Fact gathering, ascend_stack's read of the host, cann_facts.
        assert host.counts["module_runs"] <= 3, (args, host.counts)


def _an_edited_environment_file_is_rewritten_and_verified(host: Host) -> None:
    before = host.inside(f"cat {ENV_FILE}").stdout
    assert host.inside(f"echo EDITED=1 >> {ENV_FILE} && chmod 0600 {ENV_FILE}").returncode == 0
    proc, records = host.play("--check", "--diff")
    assert proc.returncode == 0, _out(proc)
    assert _changed(records) == ["template"], _ours(records)
    assert "-EDITED=1" in proc.stdout, _out(proc)
    assert _remote(records) == ["cann_facts", "template"], _ours(records)  # no verification
    proc, records = host.play()
    assert proc.returncode == 0, _out(proc)
    assert _changed(records) == ["template"], _ours(records)
    assert _remote(records) == ["cann_facts", "template", "command", "find"], _ours(records)
    assert host.inside(f"cat {ENV_FILE}").stdout == before
    assert host.inside(f"stat -c %a {ENV_FILE}").stdout.strip() == "644"


def _a_deleted_ledger_is_written_again(host: Host) -> None:
    assert host.inside(f"rm {LEDGER}").returncode == 0
    proc, records = host.play()
    assert proc.returncode == 0, _out(proc)
    assert _changed(records) == ["ledger"], _ours(records)
    assert json.loads(host.inside(f"cat {LEDGER}").stdout)["version"] == CANN
    proc, records = host.play()
    assert proc.returncode == 0 and _remote(records) == ["cann_facts"], _ours(records)


def _the_verify_tag_reads_and_checks_and_changes_nothing(host: Host, tags: str) -> None:
    proc, records = host.play("--tags", tags)
    assert proc.returncode == 0, _out(proc)
    assert _remote(records) == ["cann_facts", "command", "find"], _ours(records)
    assert not _changed(records), records
    assert any(r["status"] == "ok" and "environment sourced by login shells" in r["msg"]
               for r in _ours(records)), _ours(records)


def test_the_role_on_one_host_step_by_step(host: Host) -> None:
    """Each step starts from the state the one before left (see the steps above)."""
    _check_mode_on_the_fresh_host_writes_nothing(host)
    _first_run_installs_resolves_the_new_environment_and_verifies(host)
    _a_no_op_re_run_makes_one_remote_call(host)
    _an_edited_environment_file_is_rewritten_and_verified(host)
    _a_deleted_ledger_is_written_again(host)
    _the_verify_tag_reads_and_checks_and_changes_nothing(host, "all,verify")
    _the_verify_tag_reads_and_checks_and_changes_nothing(host, "verify")
