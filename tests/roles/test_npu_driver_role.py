"""The npu_driver role on this machine, in a mount namespace of its own: a no-op re-run makes one
remote module call (npu_driver_facts), a deleted run user is created again by a plain re-run,
verification runs after a change or with the verify tag only, and check mode stays clean.

The host is a simulated A2 node with its driver and firmware already there (a scratch root for
the driver, the simulator's npu-smi and upgrade-tool, its PCI tree bind-mounted over
/sys/bus/pci/devices). /etc, /home and /var are overlays whose writes stay in the test's
directory, so the role creates its user and group and writes its ledger for real without
touching this machine. No installer runs (the versions match) and the reboot policy is never.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import BIN, ENV
from paths import ROOT
from role_isolation import NEEDS_NAMESPACES, remote_actions, write_recorder

DRIVER, FIRMWARE = "25.5.0", "7.8.0.2.212"  # HDK of vllm-ascend-0.13.0 and its firmware
OVERLAID = ("/etc", "/home", "/var")
PCI = "/sys/bus/pci/devices"
# Ceilings of a no-op re-run: the tasks this role reaches (15 before the plan moved to vars and
# the apply tasks behind one include), and those of the whole run (the play's fact gathering and
# the dependencies ascend_stack and ledger included; 24 before).
NO_OP_ROLE_TASKS = 7
NO_OP_RUN_TASKS = 16



pytestmark = [
    NEEDS_NAMESPACES,
    # The steps share one host and run in order, as one test (pytest-xdist cannot split them).
    pytest.mark.xdist_group("npu_driver_role"),
]



def _free_id(taken: set[int]) -> int:
    return next(i for i in range(4200, 60000) if i not in taken)


@dataclass
class Host:
    tmp: Path
    uid: int
    gid: int

    def play(self, *args: str) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
        """The role on the simulated host (ansible-playbook args added); its task records."""
        record = self.tmp / "record.jsonl"
        record.unlink(missing_ok=True)
        mounts = [f"mount --bind {self.tmp / 'node' / 'sysfs'} {PCI}"]
        for path in OVERLAID:
            layer = self.tmp / "overlay" / path.strip("/")
            mounts.append(f"mount -t overlay overlay -o lowerdir={path},"
                          f"upperdir={layer}/upper,workdir={layer}/work {path}")
        command = [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                   "-e", f"@{self.tmp / 'extra.yml'}", *args, str(self.tmp / "play.yml")]
        script = " && ".join([*mounts, "exec " + shlex.join(command)])
        self.counts_file.unlink(missing_ok=True)
        env = {**os.environ, **ENV, "TASK_RECORD": str(record),
               "ANSIBLE_CALLBACK_PLUGINS": str(self.tmp / "callbacks"),
               "ANSIBLE_CALLBACKS_ENABLED": "task_record,ascend_serve.fleet.run_counts",
               "ASCEND_SERVE_RUN_COUNTS": str(self.counts_file),
               "ASCEND_SIM_NODE": str(self.tmp / "node" / "node.json"),
               "ASCEND_SIM_ROOT": str(self.tmp / "root")}
        proc = subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=ROOT, env=env,
                              capture_output=True, text=True, check=False, timeout=600)
        lines = record.read_text().splitlines() if record.exists() else []
        return proc, [json.loads(line) for line in lines]

    @property
    def counts_file(self) -> Path:
        return self.tmp / "counts.jsonl"

    def counts(self) -> dict[str, int]:
        """What the last run cost the host (the run_counts callback): tasks, skipped, ..."""
        run = json.loads(self.counts_file.read_text().splitlines()[-1])
        counts: dict[str, int] = run["hosts"]["localhost"]
        return counts

    def inside(self, command: str) -> subprocess.CompletedProcess[str]:
        """A shell command in the host's overlays (to plant drift)."""
        mounts = []
        for path in OVERLAID:
            layer = self.tmp / "overlay" / path.strip("/")
            mounts.append(f"mount -t overlay overlay -o lowerdir={path},"
                          f"upperdir={layer}/upper,workdir={layer}/work {path}")
        return subprocess.run(["unshare", "-m", "sh", "-c", " && ".join([*mounts, command])],
                              capture_output=True, text=True, check=False, timeout=60)


def _tool(path: Path, module: str) -> None:
    """A node tool of the simulator, run by this interpreter."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c "
                    f"'import sys; from ascend_sim.devtools import {module} as m; "
                    "sys.exit(m.main())' \"$@\"\n")
    path.chmod(0o755)


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Host:
    tmp = tmp_path_factory.mktemp("npu_driver")
    subprocess.run([sys.executable, "-m", "ascend_sim", "node", "create", str(tmp / "node"),
                    "--model", "atlas800-a2", "--npus", "2"], check=True, capture_output=True)
    node_file = tmp / "node" / "node.json"
    node = json.loads(node_file.read_text())
    for chip in node["chips"]:
        chip.update(firmware_version=FIRMWARE, firmware_hdk=DRIVER)
    node_file.write_text(json.dumps(node))
    base = tmp / "root" / "usr/local/Ascend"
    (base / "driver").mkdir(parents=True)
    (base / "driver" / "version.info").write_text(f"Version={DRIVER}\n")
    _tool(base / "driver" / "tools" / "upgrade-tool", "upgrade_tool")
    _tool(tmp / "bin" / "npu-smi", "npu_smi")
    write_recorder(tmp)
    for path in OVERLAID:
        for part in ("upper", "work"):
            (tmp / "overlay" / path.strip("/") / part).mkdir(parents=True)
    # Ids nobody on this machine holds (the vendor's 1000 may be taken here).
    uid = _free_id({p.pw_uid for p in pwd.getpwall()})
    gid = _free_id({g.gr_gid for g in grp.getgrall()})
    (tmp / "play.yml").write_text(yaml.safe_dump([{
        "name": "NPU driver", "hosts": "localhost", "gather_facts": True,
        "gather_subset": ["min"],
        "roles": [{"role": "ascend_serve.fleet.npu_driver", "tags": ["driver"]}],
    }]))
    (tmp / "extra.yml").write_text(yaml.safe_dump({
        "ansible_python_interpreter": sys.executable,
        "ascend_stack_set": "vllm-ascend-0.13.0",
        "ascend_stack_check_python": False,
        "npu_driver_firmware_version": FIRMWARE,
        "npu_driver_install_path": str(base),
        "npu_driver_artifact_dir": str(tmp / "no-installers"),
        "npu_driver_driver_file": "driver.run",
        "npu_driver_firmware_file": "firmware.run",
        "npu_driver_sha256": {"driver.run": "0" * 64, "firmware.run": "0" * 64},
        "npu_driver_user": "HwHiAiTest",
        "npu_driver_group": "HwHiAiTest",
        "npu_driver_uid": uid,
        "npu_driver_gid": gid,
        "npu_driver_reboot": "never",
        # The simulator's npu-smi (the role's own path is the vendor's).
        "_npu_driver_npu_smi": str(tmp / "bin" / "npu-smi"),
    }))
    return Host(tmp, uid, gid)


def _ours(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["role"] == "npu_driver"]


def _remote(records: list[dict[str, Any]]) -> list[str]:
    """The role's module runs on the host (tasks that ran and are not controller-only)."""
    return remote_actions(records, "npu_driver")


def _ran(records: list[dict[str, Any]], action: str) -> bool:
    return action in _remote(records)


def _out(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout[-6000:] + proc.stderr[-3000:]


# The tests run in order on one host: first converge, no-op re-run, drift, verify tag, check mode.


def _first_run_creates_the_user_and_group_records_and_verifies(host: Host) -> None:
    proc, records = host.play()
    assert proc.returncode == 0, _out(proc)
    remote = _remote(records)
    assert {"npu_driver_facts", "group", "user", "ledger", "npu_pci_facts",
            "npu_smi_facts"} <= set(remote), remote
    passwd = host.inside("getent passwd HwHiAiTest").stdout.split(":")
    assert passwd[2:4] == [str(host.uid), str(host.gid)], passwd
    assert passwd[4] == "Ascend NPU run user" and passwd[6].strip() == "/usr/sbin/nologin"
    ledger = json.loads(host.inside("cat /etc/ansible/facts.d/ascend_npu_driver.fact").stdout)
    assert ledger["driver_version"] == DRIVER and ledger["reboot_pending"] is False, ledger
    assert any(r["action"].endswith("assert") and r["status"] == "ok"
               and "2 chips healthy" in r["msg"] for r in _ours(records)), _ours(records)


def _a_no_op_re_run_makes_one_remote_call(host: Host) -> None:
    proc, records = host.play()
    assert proc.returncode == 0, _out(proc)
    assert _remote(records) == ["npu_driver_facts"], _ours(records)
    assert not [r for r in records if r["changed"]], records
    # Every task a host reaches costs the controller a worker, skipped or not: a converged host
    # reaches the argument check, the input check, the read, the plan shown and three skipped
    # tasks (the apply include, the ledger write, the verify include) of this role.
    ours = [r["task"] for r in _ours(records)]
    assert len(ours) <= NO_OP_ROLE_TASKS, ours
    counts = host.counts()
    assert counts["tasks"] <= NO_OP_RUN_TASKS, (counts, ours)


def _a_deleted_user_is_created_again_and_verified(host: Host) -> None:
    assert host.inside("userdel HwHiAiTest").returncode == 0
    proc, records = host.play()
    assert proc.returncode == 0, _out(proc)
    changed = [r["action"].rsplit(".", 1)[-1] for r in _ours(records) if r["changed"]]
    # userdel also removes the user's own group where it is named after the user (Debian).
    assert "user" in changed and set(changed) <= {"group", "user"}, _ours(records)
    assert _ran(records, "npu_smi_facts"), _ours(records)  # verified after the change
    passwd = host.inside("getent passwd HwHiAiTest").stdout.split(":")
    assert passwd[2] == str(host.uid), passwd
    again, records = host.play()
    assert again.returncode == 0 and _remote(records) == ["npu_driver_facts"], _ours(records)


def _the_verify_tag_reads_and_checks_and_changes_nothing(host: Host) -> None:
    proc, records = host.play("--tags", "all,verify")
    assert proc.returncode == 0, _out(proc)
    assert _remote(records) == ["npu_driver_facts", "npu_pci_facts", "npu_smi_facts"], \
        _ours(records)
    assert not [r for r in records if r["changed"]], records


def _check_mode_is_clean_and_sees_drift(host: Host) -> None:
    proc, records = host.play("--check", "--diff")
    assert proc.returncode == 0, _out(proc)
    assert _remote(records) == ["npu_driver_facts"], _ours(records)
    # A changed shell is drift: check mode reports the user task, and changes nothing.
    assert host.inside("usermod -s /bin/sh HwHiAiTest").returncode == 0
    proc, records = host.play("--check")
    assert proc.returncode == 0, _out(proc)
    changed = [r["action"].rsplit(".", 1)[-1] for r in _ours(records) if r["changed"]]
    assert changed == ["user"], _ours(records)
    assert host.inside("getent passwd HwHiAiTest").stdout.strip().endswith(":/bin/sh")
    proc, records = host.play()
    assert proc.returncode == 0, _out(proc)
    assert host.inside("getent passwd HwHiAiTest").stdout.strip().endswith(":/usr/sbin/nologin")


def _a_new_run_user_is_refused_a_uid_someone_holds(host: Host) -> None:
    proc, records = host.play("--check", "-e", "npu_driver_user=HwHiAiOther",
                              "-e", "npu_driver_uid=0")
    assert proc.returncode != 0, _out(proc)
    assert ("uid 0 for the new run user HwHiAiOther belongs to root; set npu_driver_uid to a "
            "free uid") in proc.stdout, _out(proc)
    assert _remote(records) == ["npu_driver_facts"], _ours(records)


def test_the_role_on_one_host_step_by_step(host: Host) -> None:
    """Each step starts from the state the one before left (see the steps above)."""
    _first_run_creates_the_user_and_group_records_and_verifies(host)
    _a_no_op_re_run_makes_one_remote_call(host)
    _a_deleted_user_is_created_again_and_verified(host)
    _the_verify_tag_reads_and_checks_and_changes_nothing(host)
    _check_mode_is_clean_and_sees_drift(host)
    _a_new_run_user_is_refused_a_uid_someone_holds(host)
