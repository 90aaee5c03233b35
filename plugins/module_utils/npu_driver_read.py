"""What the npu_driver role reads of a host in one round trip: the installed driver, the chips'
firmware, the role's ledger, the boot id and the run user and group. The module
``npu_driver_facts`` runs it alone, and ``stack_state`` with the other roles' reads. Runs on
managed nodes."""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.ascend_files import (
    AscendFileError,
    read_driver_info,
    read_file,
)
from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import INSTALL_PATH_ARG

FIRMWARE_RE = re.compile(r'"version":"([^"]+)"')


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return ""


def user_state(name: str) -> dict[str, object]:
    """The user as the user database (NSS) has it, with its primary group's name."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return {"name": name, "exists": False, "uid": None, "gid": None, "group": "",
                "comment": "", "shell": "", "home": "", "home_exists": False}
    try:
        group = grp.getgrgid(entry.pw_gid).gr_name
    except KeyError:
        group = ""
    return {"name": name, "exists": True, "uid": entry.pw_uid, "gid": entry.pw_gid,
            "group": group, "comment": entry.pw_gecos, "shell": entry.pw_shell,
            "home": entry.pw_dir, "home_exists": os.path.exists(entry.pw_dir)}


def group_state(name: str) -> dict[str, object]:
    try:
        return {"name": name, "exists": True, "gid": grp.getgrnam(name).gr_gid}
    except KeyError:
        return {"name": name, "exists": False, "gid": None}


def uid_owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return ""


def gid_owner(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return ""


def accounts(params: dict[str, Any]) -> dict[str, object]:
    """What the options ask about the run user and group; nothing for an option left unset."""
    found: dict[str, object] = {}
    if params.get("user") is not None:
        found["run_user"] = user_state(params["user"])
    if params.get("group") is not None:
        found["run_group"] = group_state(params["group"])
    if params.get("uid") is not None:
        found["uid_owner"] = uid_owner(params["uid"])
    if params.get("gid") is not None:
        found["gid_owner"] = gid_owner(params["gid"])
    return found


def read(module: Any) -> dict[str, object]:
    base = module.params["install_path"]
    try:
        driver = read_file(read_driver_info, os.path.join(base, "driver", "version.info"))
    except (AscendFileError, OSError) as exc:
        module.fail_json(msg=f"cannot read the installed driver: {exc}")
    tool = os.path.join(base, "driver", "tools", "upgrade-tool")
    firmware: list[str] = []
    unreadable = 0
    if os.access(tool, os.X_OK):
        rc, out, err = module.run_command([tool, "--device_index", "-1", "--system_version"])
        if rc != 0:
            module.fail_json(msg=f"{tool} failed with rc {rc}: {err.strip()}")
        found = FIRMWARE_RE.findall(out)
        unreadable = sum(1 for v in found if v == "NA")
        firmware = sorted({v for v in found if v != "NA"})
    ledger_text = _read(module.params["ledger_path"])
    try:
        ledger = json.loads(ledger_text) if ledger_text else {}
    except ValueError:
        ledger = {}  # a damaged ledger is rewritten by the role
    return {
        "driver_version": driver["version"] if driver else "",
        "firmware_versions": firmware,
        "firmware_unreadable_chips": unreadable,
        "upgrade_tool": os.access(tool, os.X_OK),
        "ledger": ledger,
        "boot_id": _read("/proc/sys/kernel/random/boot_id").strip(),
        **accounts(module.params),
    }


ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    **INSTALL_PATH_ARG,
    "ledger_path": {"type": "path", "default": "/etc/ansible/facts.d/ascend_npu_driver.fact"},
    "user": {"type": "str"},
    "group": {"type": "str"},
    "uid": {"type": "int"},
    "gid": {"type": "int"},
}
FACT = "ascend_npu_driver_state"
ERRORS: tuple[type[Exception], ...] = ()
