"""What the host_tuning role reads of a host in one round trip: kernel settings, CPU frequency
governors, PAM limits, its files and the jemalloc package. The module ``host_tuning_state``
runs it alone, and ``stack_state`` with the other roles' reads. Runs on managed nodes."""

from __future__ import annotations

import glob
import os
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.file_state import file_state
from ansible_collections.ascend_serve.fleet.plugins.module_utils.package_db import (
    PACKAGES_ARGS,
    PackageDbError,
    missing_packages,
)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def sysctl_state(key: str, proc: str = "/proc/sys") -> dict[str, Any]:
    path = os.path.join(proc, key.replace(".", "/"))
    if not os.path.exists(path):
        return {"exists": False, "writable": False, "value": None}
    text = _read(path)
    return {"exists": True, "writable": os.access(path, os.W_OK),
            "value": " ".join(text.split()) if text is not None else None}


def sysctl_file(path: str | None) -> dict[str, str]:
    """``key=value`` settings of a sysctl.d file, as ansible.posix.sysctl reads them."""
    settings: dict[str, str] = {}
    for line in (_read(path) or "").splitlines() if path else []:
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        settings[key.strip()] = value.strip()
    return settings


def governors(cpu_dir: str) -> dict[str, Any]:
    """The policies' scaling_governor files: policy directories, else the per-CPU ones that
    are real directories (a link to a policy is the same file)."""
    files = glob.glob(os.path.join(cpu_dir, "cpufreq", "policy*", "scaling_governor"))
    files += [f for f in glob.glob(os.path.join(cpu_dir, "cpu*", "cpufreq", "scaling_governor"))
              if not os.path.islink(os.path.dirname(f))]
    files = sorted(f for f in files if os.path.isfile(f))
    if not files:
        return {"files": [], "current": [], "writable": False, "available": []}
    offer = _read(os.path.join(os.path.dirname(files[0]), "scaling_available_governors"))
    return {"files": files, "current": [(_read(f) or "").strip() for f in files],
            "writable": os.access(files[0], os.W_OK), "available": (offer or "").split()}


def limits(path: str | None) -> list[list[str]]:
    entries = []
    for line in (_read(path) or "").splitlines() if path else []:
        fields = line.split()
        if len(fields) >= 4 and not fields[0].startswith("#"):
            entries.append(fields[:4])
    return entries


def read(module: Any) -> dict[str, Any]:
    params = module.params
    return {
        "changed": False,
        "sysctl": {key: sysctl_state(key) for key in params["sysctl"]},
        "sysctl_file": sysctl_file(params["sysctl_file"]),
        "governor": (governors(params["cpu_dir"]) if params["governor"] else
                     {"files": [], "current": [], "writable": False, "available": []}),
        "limits": limits(params["limits_file"]),
        "files": {path: file_state(path) for path in params["files"]},
        "missing_packages": missing_packages(params["packages"], params["package_manager"],
                                             params["dpkg_status"]),
    }


ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "sysctl": {"type": "list", "elements": "str", "default": []},
    "sysctl_file": {"type": "path"},
    "governor": {"type": "bool", "default": False},
    "cpu_dir": {"type": "path", "default": "/sys/devices/system/cpu"},
    "limits_file": {"type": "path"},
    "files": {"type": "list", "elements": "path", "default": []},
    **PACKAGES_ARGS,
}
FACT = ""
ERRORS = (PackageDbError,)
