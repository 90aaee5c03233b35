"""A file as a state module reports it: sha1 of its content, mode, owner and group, so that a role
decides on the controller whether its ``copy``/``template`` task must run (rendering the wanted
text there and comparing ``| hash('sha1')``), without a round trip per file.

Runs on managed nodes inside the modules' payloads: standard library only, Python 3.8+
(annotations are not evaluated).
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import stat
from typing import Any


def _name(lookup: Any, ident: int) -> str:
    try:
        return str(lookup(ident)[0])
    except KeyError:
        return str(ident)


def sha1(path: str) -> str | None:
    """The sha1 of a regular file's content; None where it cannot be read."""
    digest = hashlib.sha1()  # noqa: S324 - a change detector, as Ansible's stat and copy use it
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def file_state(path: str, checksum: bool = True) -> dict[str, Any] | None:
    """None for a missing path; else sha1 (regular files), mode, owner, group, isdir, islnk.
    A symbolic link is followed (as Ansible's copy and template do); a dangling one is
    reported itself (sha1 null)."""
    link = os.path.islink(path)
    try:
        st = os.stat(path)
    except OSError:
        if not link:
            return None
        try:
            st = os.lstat(path)  # a dangling link: there, but nothing behind it
        except OSError:
            return None
    isdir = stat.S_ISDIR(st.st_mode)
    return {
        "sha1": sha1(path) if checksum and stat.S_ISREG(st.st_mode) else None,
        "mode": f"{stat.S_IMODE(st.st_mode):04o}",
        "owner": _name(pwd.getpwuid, st.st_uid),
        "group": _name(grp.getgrgid, st.st_gid),
        "isdir": isdir,
        "islnk": link,
    }


# What a role may ask of a path (the keys of ``want`` below), in the order differences name them.
WANT_KEYS = ("directory", "sha1", "mode", "owner", "group")


def differences(seen: dict[str, Any] | None, want: dict[str, Any]) -> list[str]:
    """What differs between a path as :func:`file_state` reports it (``seen``, None when missing)
    and what a role wants of it: ``directory`` (true: a directory; false: not one), ``sha1`` (of
    the content), ``mode``, ``owner``, ``group``; a key that ``want`` leaves out (or sets to None)
    is not compared. Empty when the path is as wanted; else one phrase per difference."""
    if seen is None:
        return ["missing"]
    found = []
    directory = want.get("directory")
    if directory is not None and bool(seen.get("isdir")) != bool(directory):
        found.append("not a directory" if directory else "a directory")
    for key in WANT_KEYS[1:]:
        wanted = want.get(key)
        if wanted is not None and seen.get(key) != str(wanted):
            found.append(f"{key} {seen.get(key)} (wanted {wanted})")
    return found
