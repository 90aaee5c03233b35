"""The numbers the version sets are checked against: the host's glibc and kernel and the version of
the Python that serving will use (the ascend_stack role's host check). The module
``host_runtime_facts`` runs it alone, and ``stack_state`` with the roles' reads. Runs on managed
nodes."""

from __future__ import annotations

import json
import os
import platform
import sys
from typing import Any

# What the serving Python reports, when it is not the interpreter this runs in.
PROBE = ("import json, platform, sys; print(json.dumps({'glibc': platform.libc_ver()[1], "
         "'kernel': platform.release(), 'python': '%d.%d' % sys.version_info[:2]}))")


class HostRuntimeError(Exception):
    """The serving Python could not be run or did not answer."""


def _same_interpreter(python: str) -> bool:
    try:
        return os.path.samefile(python, sys.executable)
    except OSError:
        return False


def read(module: Any) -> dict[str, str]:
    python = module.params["python"]
    if not python or _same_interpreter(python):
        return {"glibc": platform.libc_ver()[1], "kernel": platform.release(),
                "python": f"{sys.version_info[0]}.{sys.version_info[1]}"}
    rc, out, err = module.run_command([python, "-c", PROBE])
    if rc != 0:
        raise HostRuntimeError(f"{python} exited {rc}: {str(err).strip()}")
    try:
        found = json.loads(out)
    except ValueError as exc:
        raise HostRuntimeError(f"{python} answered {out!r}") from exc
    return {key: str(found.get(key, "")) for key in ("glibc", "kernel", "python")}


ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "python": {"type": "str", "default": ""},
}
FACT = "ascend_host_runtime"
FAILURE = "cannot read the host's glibc, kernel and Python"
ERRORS = (HostRuntimeError, OSError)
