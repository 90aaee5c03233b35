"""A user and a group as a state module reports them (from the user database, NSS), so that a
role decides on the controller whether its ``user``/``group`` tasks must run.

Runs on managed nodes inside the modules' payloads: standard library only, Python 3.8+
(annotations are not evaluated).
"""

from __future__ import annotations

import grp
import pwd
from typing import Any


def user_state(name: str | None) -> dict[str, Any]:
    """``exists``; for an existing user its uid and gid, its primary group's name, supplementary
    groups, shell and home directory."""
    if not name:
        return {"exists": False}
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return {"exists": False}
    try:
        primary = grp.getgrgid(entry.pw_gid).gr_name
    except KeyError:
        primary = str(entry.pw_gid)
    groups = sorted(g.gr_name for g in grp.getgrall() if name in g.gr_mem)
    return {"exists": True, "uid": entry.pw_uid, "gid": entry.pw_gid, "group": primary,
            "groups": groups, "shell": entry.pw_shell, "home": entry.pw_dir}


def group_state(name: str | None) -> dict[str, Any]:
    """``exists`` of a group, and its ``gid`` when it does."""
    if not name:
        return {"exists": False}
    try:
        entry = grp.getgrnam(name)
    except KeyError:
        return {"exists": False}
    return {"exists": True, "gid": entry.gr_gid}
