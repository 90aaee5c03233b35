"""The npu_metrics role's state module (its one remote read on a node, #21/#22) run as Ansible runs
it against fake trees: the package read from dpkg's database (no package manager), the account,
files, the link and the units through a stand-in systemctl that may only be asked, never told."""

from __future__ import annotations

import hashlib
import os
import pwd
from pathlib import Path
from typing import Any

from ansible_run import module_result

DPKG_STATUS = """Package: prometheus-node-exporter
Status: install ok installed
Architecture: amd64
Version: 1.5.0-1+b6

Package: prometheus
Status: deinstall ok config-files
Version: 2.42.0+ds-5
"""

# is-active: on.timer and half.service; is-enabled: on.timer only. Every call is logged.
SYSTEMCTL = """#!/bin/sh
echo "$*" >> "{log}"
case "$1 $3" in
  "is-active on.timer"|"is-active half.service"|"is-enabled on.timer") exit 0 ;;
esac
exit 3
"""


def _write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def _run(args: dict[str, Any], tmp_path: Path, env: dict[str, str] | None = None
         ) -> dict[str, Any]:
    result = module_result("npu_metrics_state", args, tmp_path, check_mode=True, env=env)
    assert result.get("failed") is None, result
    assert result["changed"] is False, result
    return result


def test_reads_package_account_files_link_and_units(tmp_path: Path) -> None:
    status = _write(tmp_path / "status", DPKG_STATUS)
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o755)
    state_dir.chmod(0o755)
    output = _write(state_dir / "ascend_npu.prom", "machine_npu_nums 8\n")
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    (textfile / "ascend_npu.prom").symlink_to(output)
    (textfile / "dangling.prom").symlink_to(tmp_path / "none")
    bindir = tmp_path / "bin"
    log = tmp_path / "systemctl.log"
    _write(bindir / "systemctl", SYSTEMCTL.format(log=log), 0o755)
    me = pwd.getpwuid(os.getuid()).pw_name

    result = _run({
        "packages": ["prometheus-node-exporter", "prometheus"], "package_manager": "apt",
        "dpkg_status": str(status), "user": me, "group": "no-such-group-ascend",
        "files": [str(state_dir), str(output), str(textfile / "ascend_npu.prom"),
                  str(tmp_path / "none")],
        "links": [str(textfile / "ascend_npu.prom"), str(textfile / "dangling.prom"), str(output),
                  str(tmp_path / "none")],
        "units": ["on.timer", "half.service", "off.service"],
    }, tmp_path, env={"PATH": f"{bindir}:{os.environ['PATH']}"})

    # Installed, and left with its configuration only (not installed).
    assert result["package_manager"] == "apt"
    assert result["missing_packages"] == ["prometheus"]
    assert result["user"]["exists"] is True
    assert result["user"]["home"] == pwd.getpwnam(me).pw_dir
    assert result["user"]["shell"] == pwd.getpwnam(me).pw_shell
    assert isinstance(result["user"]["groups"], list)
    assert result["group"] == {"exists": False}
    files = result["files"]
    assert files[str(state_dir)]["isdir"] is True
    assert files[str(state_dir)]["mode"] == "0755"
    assert files[str(output)]["sha1"] == hashlib.sha1(  # noqa: S324 - what file_state reports
        b"machine_npu_nums 8\n").hexdigest()
    assert files[str(output)]["owner"] == me
    # A link is followed for its state; its own target is in links.
    assert files[str(textfile / "ascend_npu.prom")]["islnk"] is True
    assert files[str(textfile / "ascend_npu.prom")]["sha1"] == files[str(output)]["sha1"]
    assert files[str(tmp_path / "none")] is None
    assert result["links"] == {
        str(textfile / "ascend_npu.prom"): str(output),
        str(textfile / "dangling.prom"): str(tmp_path / "none"),
        str(output): None,
        str(tmp_path / "none"): None,
    }
    assert result["units"] == {
        "on.timer": {"active": True, "enabled": True},
        "half.service": {"active": True, "enabled": False},
        "off.service": {"active": False, "enabled": False},
    }
    # systemctl was only asked: two questions per unit, nothing else.
    calls = log.read_text().splitlines()
    assert len(calls) == 6
    assert {call.split()[0] for call in calls} == {"is-active", "is-enabled"}
    assert all(call.split()[1] == "--quiet" for call in calls)


def test_a_fresh_node_reads_as_missing(tmp_path: Path) -> None:
    status = _write(tmp_path / "status", "Package: bash\nStatus: install ok installed\n")
    result = _run({
        "packages": ["prometheus-node-exporter"], "package_manager": "apt",
        "dpkg_status": str(status), "user": "no-such-user-ascend", "group": "no-such-group-ascend",
        "files": [str(tmp_path / "unit")], "links": [str(tmp_path / "link")],
        "units": ["ascend-serve-test-no-such.timer"],
    }, tmp_path, env={"PATH": str(tmp_path / "no-bin")})
    assert result["missing_packages"] == ["prometheus-node-exporter"]
    assert result["package_manager"] == "apt"
    assert result["user"] == {"exists": False}
    assert result["group"] == {"exists": False}
    assert result["files"] == {str(tmp_path / "unit"): None}
    assert result["links"] == {str(tmp_path / "link"): None}
    # Whether or not systemctl is found (get_bin_path also looks in the sbin directories), a
    # unit systemd does not know is neither active nor enabled.
    assert result["units"] == {"ascend-serve-test-no-such.timer": {"active": False,
                                                                  "enabled": False}}


def test_an_unreadable_package_database_fails_the_read(tmp_path: Path) -> None:
    result = module_result("npu_metrics_state", {
        "packages": ["prometheus-node-exporter"], "package_manager": "apt",
        "dpkg_status": str(tmp_path / "none")}, tmp_path, check_mode=True)
    assert result["failed"] is True
    assert "cannot read" in result["msg"]
