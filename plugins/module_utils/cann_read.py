"""What the cann role reads of a host in one round trip: the installed toolkits, kernels/ops and
NNAL, the environment their set_env.sh scripts export and the files the role writes. The
module ``cann_facts`` runs it alone, and ``stack_state`` with the other roles' reads. Runs
on managed nodes."""

from __future__ import annotations

import os
import re
import shlex
from typing import Any

from ansible_collections.ascend_serve.fleet.plugins.module_utils.ascend_files import (
    AscendFileError,
    ops_version_info,
    read_component_version_info,
    read_driver_info,
    read_file,
    read_nnal_atb_info,
    read_toolkit_install_info,
)
from ansible_collections.ascend_serve.fleet.plugins.module_utils.file_state import file_state
from ansible_collections.ascend_serve.fleet.plugins.module_utils.module_main import INSTALL_PATH_ARG

INFO_NAME = "ascend_toolkit_install.info"
MAX_DEPTH = 4
# ascend-toolkit/latest is an alias of the installed toolkit: a symlink, or (CANN 8.2.x, corpus
# ls-toolkit-latest-8.2.RC2-symlinks.txt) a real directory of per-component symlinks with a real
# <arch>-linux/ directory in it. It is never a toolkit of its own.
ALIAS_NAMES = ("latest",)


def _version(reader: Any, path: str) -> str:
    info = read_file(reader, path)
    return str(info["version"]) if info else ""


def find_toolkits(base: str) -> list[dict[str, str]]:
    found: list[dict[str, str]] = []
    seen: set[str] = set()
    start = base.rstrip("/").count("/")
    for dirpath, dirnames, filenames in os.walk(base):  # does not follow symlinks
        if dirpath.count("/") - start >= MAX_DEPTH:
            dirnames[:] = []
        if os.path.basename(dirpath) == "ascend-toolkit":
            dirnames[:] = [d for d in dirnames if d not in ALIAS_NAMES]
        if INFO_NAME not in filenames:
            continue
        root = os.path.dirname(dirpath)
        if os.path.basename(root) in ALIAS_NAMES or os.path.realpath(root) in seen:
            continue
        seen.add(os.path.realpath(root))
        version = _version(read_toolkit_install_info, os.path.join(dirpath, INFO_NAME))
        found.append(
            {
                "version": version,
                "root": root,
                # the kernels/ops release: version_dir= of opp_kernel/version.info (up to
                # CANN 8.3) or opp/version.info (from 8.5); Version= there is a build number
                "kernels_version": _version(
                    read_component_version_info, os.path.join(root, ops_version_info(version))
                ),
            }
        )
    return sorted(found, key=lambda t: t["root"])


def cann_state(base: str) -> dict[str, object]:
    """What is installed under ``base``; raises AscendFileError on a file it cannot read."""
    return {
        "driver_version": _version(read_driver_info, os.path.join(base, "driver", "version.info")),
        "toolkits": find_toolkits(base) if os.path.isdir(base) else [],
        "nnal_version": _version(
            read_nnal_atb_info, os.path.join(base, "nnal", "atb", "latest", "version.info")
        ),
    }


# The environment the cann role's profile script gives a login shell, resolved without one: a
# clean environment with a fixed PATH, no profile or rc file.
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def resolve_script(scripts: list[str]) -> str:
    """The bash script that sources ``scripts`` as the profile script does (one ``.`` a line,
    so its status is the last one's), then prints the environment, NUL-separated."""
    sources = [f". {shlex.quote(path)}" for path in scripts]
    return "\n".join([*sources[:-1], f"{sources[-1]} && env -0" if sources else "env -0"])


def parse_environment(output: bytes) -> dict[str, str]:
    """``env -0`` output: the variables with a shell name and a one-line value."""
    found: dict[str, str] = {}
    for entry in output.decode("utf-8", "replace").split("\0"):
        key, sep, value = entry.partition("=")
        if sep and NAME.match(key) and "\n" not in value:
            found[key] = value
    return found


def resolve_environment(module: Any, scripts: list[str]) -> tuple[dict[str, str], str]:
    """(environment, error): what sourcing ``scripts`` in order exports, or why it is not read."""
    if not scripts:
        return {}, ""
    missing = [path for path in scripts if not os.path.isfile(path)]
    if missing:
        return {}, "not found: " + ", ".join(missing)
    argv = ["env", "-i", f"PATH={CLEAN_PATH}", "bash", "--noprofile", "--norc", "-c",
            resolve_script(scripts)]
    rc, out, err = module.run_command(argv, cwd="/", encoding=None)
    if rc != 0:
        text = err.decode("utf-8", "replace").strip() if isinstance(err, bytes) else str(err)
        return {}, f"sourcing {', '.join(scripts)} exited {rc}" + (f": {text}" if text else "")
    return parse_environment(out if isinstance(out, bytes) else out.encode()), ""


def read(module: Any) -> dict[str, object]:
    state = cann_state(module.params["install_path"])
    environment, error = resolve_environment(module, module.params["set_env"])
    state["environment"] = environment
    state["environment_error"] = error
    state["files"] = {path: file_state(path) for path in module.params["files"]}
    return state


ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    **INSTALL_PATH_ARG,
    "set_env": {"type": "list", "elements": "path", "default": []},
    "files": {"type": "list", "elements": "path", "default": []},
}
FACT = "ascend_cann_state"
FAILURE = "cannot read the installed CANN"
ERRORS = (AscendFileError, OSError)
