#!/usr/bin/python
"""Read, in one round trip, what the swap role decides from: the swap file, swaps, fstab."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: swap_state
short_description: Read a swap file's state, the active swap areas and its fstab lines
description:
  - The one remote read of the C(ascend_serve.fleet.swap) role. It returns the effective
    capabilities of the process running it (C(CapEff) of C(/proc/self/status); swapon and
    swapoff need C(CAP_SYS_ADMIN)), the active swap areas (C(/proc/swaps)), the swap file's
    size, mode and owner, its signature (C(blkid --probe), the swap file only), and the lines of
    C(/etc/fstab) that name it.
  - The role compares this with what it wants and runs only the tasks that change something.
version_added: 0.4.0
options:
  path:
    description: The swap file.
    type: path
    required: true
  fstab:
    description: The file system table.
    type: path
    default: /etc/fstab
extends_documentation_fragment:
  - ascend_serve.fleet.common
  - ascend_serve.fleet.common.read_only
"""

EXAMPLES = r"""
- name: Read the swap file's state
  ascend_serve.fleet.swap_state:
    path: /swapfile
  register: _swap_state
"""

RETURN = r"""
capeff:
  description: The hexadecimal effective capability set of the process that ran the module.
  returned: always
  type: str
  sample: 000001ffffffffff
swaps:
  description: The text of C(/proc/swaps) (empty where it cannot be read).
  returned: always
  type: str
file:
  description: The swap file.
  returned: always
  type: dict
  contains:
    exists:
      description: Whether the path exists.
      type: bool
    isreg:
      description: Whether it is a regular file.
      type: bool
    size:
      description: Its size in bytes (0 when it does not exist).
      type: int
    mode:
      description: Its permissions, such as C(0600); null when it does not exist.
      type: str
    owner:
      description: Its owner's name; null when it does not exist.
      type: str
    group:
      description: Its group's name; null when it does not exist.
      type: str
    signature:
      description:
        - What C(blkid --probe --match-tag TYPE) finds on it (C(swap) for a swap area); empty
          for none, or when it is not a regular file.
      type: str
fstab_lines:
  description: The lines of O(fstab) whose first field is O(path), in order.
  returned: always
  type: list
  elements: str
fstab_file:
  description:
    - The state of O(fstab); null where it does not exist.
    - Its C(mode) (such as C(0644)), C(owner), C(group), C(isdir) and C(islnk); its C(sha1) is
      not read (null).
  returned: always
  type: dict
"""

import os
import re
import stat
import subprocess
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.file_state import file_state
from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import result_main

_CAPEFF = re.compile(r"^CapEff:\s*([0-9a-fA-F]+)", re.MULTILINE)


def _text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def signature(module: Any, path: str) -> str:
    """blkid's TYPE of the file's content; empty for none (blkid's rc 2)."""
    blkid = module.get_bin_path("blkid", opt_dirs=["/sbin", "/usr/sbin"])
    if not blkid:
        return ""
    try:
        done = subprocess.run([blkid, "--probe", "--match-tag", "TYPE", "--output", "value",
                               path], capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def swap_file(module: Any, path: str) -> dict[str, Any]:
    state = file_state(path, checksum=False)
    if state is None:
        return {"exists": False, "isreg": False, "size": 0, "mode": None, "owner": None,
                "group": None, "signature": ""}
    st = os.stat(path)
    isreg = stat.S_ISREG(st.st_mode)
    return {"exists": True, "isreg": isreg, "size": st.st_size, "mode": state["mode"],
            "owner": state["owner"], "group": state["group"],
            "signature": signature(module, path) if isreg else ""}


def fstab_lines(text: str, path: str) -> list[str]:
    return [line for line in text.splitlines()
            if line.split()[:1] == [path] and not line.lstrip().startswith("#")]


def run(module: Any) -> dict[str, Any]:
    params = module.params
    found = _CAPEFF.search(_text("/proc/self/status"))
    return {
        "changed": False,
        "capeff": found.group(1) if found else "0",
        "swaps": _text("/proc/swaps"),
        "file": swap_file(module, params["path"]),
        "fstab_lines": fstab_lines(_text(params["fstab"]), params["path"]),
        "fstab_file": file_state(params["fstab"], checksum=False),
    }


def main() -> None:
    result_main(
        {
            "path": {"type": "path", "required": True},
            "fstab": {"type": "path", "default": "/etc/fstab"},
        },
        run,
    )


if __name__ == "__main__":
    main()
