"""A host's glibc, kernel, serving Python and installed driver against what its version sets
need. No pydantic and no matrix file: the filters that use it run in every Ansible worker.

The ``ascend_stack`` role refuses a host below its sets before anything changes (filter
``stack_host_problems`` over ``ascend_stack_resolved`` and the host's numbers, module
``host_runtime_facts``); the messages name each number, the set that needs more, and the fix
(docs/operating.md, "Python on the host").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

FIX_GLIBC = ("Fix: serve in a container (vllm_service_runtime: container, the image brings its "
             "glibc), or choose a set whose wheels this glibc runs (ascend-serve matrix).")
FIX_PYTHON = ("Fix, one of: serve in a container (vllm_service_runtime: container, the image "
              "brings its Python); python_env_manager: conda with python_env_conda_channel (a "
              "site mirror of a conda channel) and the Miniconda installer "
              "(python_env_conda_artifact_dir or _url, python_env_conda_sha256); or install "
              "Python {python} from the OS's repositories or the site mirror and set "
              "python_env_python to it (ascend_stack_python follows).")
_NUMBERS = re.compile(r"^[0-9]+(\.[0-9]+)*")


def numbers(version: str) -> tuple[int, ...]:
    """The leading dotted numbers of a version (``5.10.0-60.oe2203`` -> (5, 10, 0)); () if none."""
    found = _NUMBERS.match(version.strip())
    return tuple(int(part) for part in found.group(0).split(".")) if found else ()


def _older(version: str, than: str) -> bool:
    return numbers(version) < numbers(than)


def hdk_accepts(supported: list[str], version: str) -> bool:
    """Whether a driver version belongs to one of the HDK release lines in ``supported``: it
    equals one or starts with it and a dot, case and surrounding white space aside."""
    got = version.strip().lower()
    return any(got == v.lower() or got.startswith(v.lower() + ".") for v in supported)


def host_problems(resolved: Mapping[str, Any], host: Mapping[str, Any], *, wheels_here: bool,
                  check_python: bool, python: str) -> list[str]:
    """Why the host cannot take the resolved set and its serving environment's set; empty when
    it can. ``host`` holds ``glibc``, ``kernel`` and ``python`` (``major.minor``);
    ``wheels_here`` is false where the server runs in a container (the image brings glibc and
    Python); ``python`` names the interpreter in the message."""
    serving = resolved.get("serving") or resolved
    sets = [resolved] + ([serving] if serving.get("name") != resolved.get("name") else [])
    glibc, kernel = str(host.get("glibc") or ""), str(host.get("kernel") or "")
    problems: list[str] = []
    for stack in sets:
        need = str(stack.get("glibc") or "")
        if wheels_here and need and (not glibc or _older(glibc, need)):
            problems.append(f"glibc {glibc or 'not found'} is older than {need}, which set "
                            f"{stack['name']} needs (its wheels are manylinux_"
                            f"{need.replace('.', '_')}). {FIX_GLIBC}")
        need_kernel = str(stack.get("kernel") or "")
        if need_kernel and _older(kernel or "0", need_kernel):
            problems.append(f"kernel {kernel} is older than {need_kernel}, which set "
                            f"{stack['name']} needs")
    allowed = [str(v) for v in serving.get("python") or []]
    running = str(host.get("python") or "")
    if check_python and wheels_here and allowed and running not in allowed:
        least = f" (at least {allowed[0]})" if _older(running or "0", allowed[0]) else ""
        problems.append(f"{python} is Python {running}; set {serving['name']} needs "
                        f"{' or '.join(allowed)}{least}. "
                        + FIX_PYTHON.format(python=allowed[-1]))
    return problems
