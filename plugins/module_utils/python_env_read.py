"""What the python_env role reads of a host in one round trip: the environment (interpreter,
site-packages, the locked distributions' versions), its files, the OS packages it needs and
the install marker. The module ``python_env_state`` runs it alone, and ``stack_state`` with the
other roles' reads. Runs on managed nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.file_state import file_state
from ansible_collections.ascend_serve.fleet.plugins.module_utils.package_db import (
    PACKAGES_ARGS,
    PackageDbError,
    missing_packages,
)

# Run by the environment's interpreter (any Python 3): its version, its site-packages and the
# versions of the distributions named in argv[1] (JSON). Imports nothing of the environment.
PROBE = """
import json, sys, sysconfig
try:
    from importlib import metadata
except ImportError:
    metadata = None
found = {}
for name in json.loads(sys.argv[1]):
    try:
        found[name] = metadata.version(name) if metadata else None
    except Exception:
        found[name] = None
print(json.dumps({"python": "%d.%d.%d" % tuple(sys.version_info[:3]),
                  "purelib": sysconfig.get_paths()["purelib"], "distributions": found}))
"""


def python_version(python: str) -> str | None:
    """Major.minor of an interpreter; this process's own where it is the same file."""
    try:
        if os.path.realpath(python) == os.path.realpath(sys.executable):
            return f"{sys.version_info[0]}.{sys.version_info[1]}"
        done = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % tuple(sys.version_info[:2]))"],
            capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def env_state(prefix: str, distributions: list[str], purelib_files: list[str]) -> dict[str, Any]:
    """The environment at ``prefix``, as RETURN's env describes it."""
    python = os.path.join(prefix, "bin", "python")
    state: dict[str, Any] = {"exists": os.path.exists(python), "python": None, "error": "",
                             "purelib": None,
                             "distributions": dict.fromkeys(distributions),
                             "files": dict.fromkeys(purelib_files)}
    if not state["exists"]:
        return state
    try:
        done = subprocess.run([python, "-c", PROBE, json.dumps(distributions)],
                              capture_output=True, text=True, check=False, timeout=120)
        report = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        state["error"] = f"{python} did not run: {exc}"
        return state
    if report is None:
        state["error"] = (f"{python} exited with rc {done.returncode}: "
                          f"{done.stderr.strip()[-500:]}")
        return state
    state.update(python=report["python"], purelib=report["purelib"],
                 distributions=report["distributions"])
    state["files"] = {rel: file_state(os.path.join(report["purelib"], rel))
                      for rel in purelib_files}
    return state


def listed(directories: list[str]) -> list[str]:
    """The regular files directly in ``directories`` (none for a missing directory)."""
    found = []
    for directory in directories:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        found += [os.path.join(directory, name) for name in names
                  if os.path.isfile(os.path.join(directory, name))]
    return found


def read_marker(path: str | None) -> Any:
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def read(module: Any) -> dict[str, Any]:
    params = module.params
    conda = params["conda_prefix"]
    return {
        "changed": False,
        "python_version": python_version(params["python"]) if params["python"] else None,
        "conda": bool(conda) and os.path.exists(os.path.join(conda, "bin", "conda")),
        "missing_packages": missing_packages(params["packages"], params["package_manager"],
                                             params["dpkg_status"]),
        "env": env_state(params["prefix"], params["distributions"], params["purelib_files"]),
        "files": {path: file_state(path)
                  for path in params["files"] + listed(params["directories"])},
        "marker": read_marker(params["marker"]),
    }


ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "prefix": {"type": "path", "required": True},
    "python": {"type": "path"},
    "conda_prefix": {"type": "path"},
    **PACKAGES_ARGS,
    "distributions": {"type": "list", "elements": "str", "default": []},
    "files": {"type": "list", "elements": "path", "default": []},
    "directories": {"type": "list", "elements": "path", "default": []},
    "purelib_files": {"type": "list", "elements": "str", "default": []},
    "marker": {"type": "path"},
}
FACT = ""
ERRORS = (PackageDbError,)
