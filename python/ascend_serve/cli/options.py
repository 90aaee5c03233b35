"""The options and arguments several ``ascend-serve`` commands share, defined once.

Each is a typer ``Annotated`` type: a command declares ``as_json: JsonFlag = False`` and gets the
same flag, help and checks as every other command with it. Options one command alone has stay in
that command's module.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import typer

from ansible_collections.ascend_serve.fleet.plugins.module_utils.validate_wire import url_error
from ascend_serve.bench.runner import ENDPOINTS
from ascend_serve.cli.console import fail
from ascend_serve.serving.profiles import ProfileError, load_raw
from ascend_serve.stack.npusmi import DEFAULT_NPU_SMI

JSON_HELP = "Print JSON for machines."


def json_option(text: str = JSON_HELP) -> Any:
    """``--json`` with a command's own description of what it prints (``text``)."""
    return typer.Option("--json", help=text)


def _profile_names(incomplete: str) -> list[str]:
    """Shell completion of a profile name: the default profiles file's names."""
    try:
        return sorted(n for n in load_raw() if n.startswith(incomplete))
    except ProfileError:
        return []


# --- host names and URLs ------------------------------------------------------------------------

_LABEL = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?$")


def host_problem(host: str) -> str | None:
    """Why ``host`` cannot be a host name or an IP address (None when it can). The resolver
    refuses these with a UnicodeError from the IDNA codec (an empty label, ``a..b``, or a label
    over 63 characters) or a lookup error: they are bad input, said before anything connects."""
    text = host.strip()
    if not text:
        return "an empty host name"
    try:
        ipaddress.ip_address(text.strip("[]"))
        return None
    except ValueError:
        pass
    name = text[:-1] if text.endswith(".") else text
    if len(name) > 253:
        return f"host name {host!r} is longer than 253 characters"
    try:
        ascii_name = name.encode("idna").decode("ascii")
    except UnicodeError:
        ascii_name = ""
    labels = (ascii_name or name).split(".")
    for label in labels:
        if not label:
            return f"host name {host!r} has an empty label (two dots in a row, or a leading dot)"
        if len(label) > 63:
            return (f"host name {host!r} has a label of {len(label)} characters "
                    "(at most 63 between dots)")
        if not _LABEL.match(label):
            return (f"host name {host!r}: label {label!r} may hold only letters, digits and '-' "
                    "(not at its start or end)")
    if not ascii_name:
        return f"host name {host!r} cannot be encoded for DNS (IDNA)"
    return None


def url_problem(url: str) -> str | None:
    """Why ``url`` is not a usable server URL (None when it is): the validate module's rules
    (scheme, host, port; ``url_error``), then the host name's (:func:`host_problem`)."""
    problem = url_error(url)
    if problem:
        return problem
    hostname = urlsplit(url).hostname or ""
    problem = host_problem(hostname)
    return f"invalid URL {url!r}: {problem}" if problem else None


def _check_url(value: str) -> str:
    """The URL argument's check while parsing: one line and exit 2, before anything connects."""
    problem = url_problem(value)
    if problem:
        raise fail(problem)
    return value


def _check_host(value: str | None) -> str | None:
    problem = host_problem(value) if value is not None else None
    if problem:
        raise fail(f"--host: {problem}")
    return value


# --- output --------------------------------------------------------------------------------------

JsonFlag = Annotated[bool, json_option()]

# --- servers and profiles ------------------------------------------------------------------------

ServerUrl = Annotated[
    str, typer.Argument(help="Server URL, e.g. http://127.0.0.1:8000 (a /v1 suffix is accepted).",
                        callback=_check_url)
]
ProfileName = Annotated[str, typer.Argument(help="Serving profile (ascend-serve profiles list).",
                                            autocompletion=_profile_names)]
ProfileFiles = Annotated[list[Path] | None, typer.Option(
    "--profiles", help="Extra profile file(s), read after serving-profiles.yml; repeatable.")]
ProfileSet = Annotated[list[str] | None, typer.Option(
    "--set", help="Override a profile field, FIELD=VALUE (YAML value), e.g. "
    "vllm.max-model-len=8192 or parallel.tensor=8; repeatable.")]
ModelDir = Annotated[Path | None, typer.Option(
    help="Model directory (default /var/lib/ascend-serve/models/<profile's model name>).")]
ServingEnv = Annotated[Path | None, typer.Option(
    help="The serving environment (default: the python_env role's, from its local fact).")]
ListenHost = Annotated[str | None, typer.Option(help="Listen address (profile's host).",
                                                callback=_check_host)]
ListenPort = Annotated[int | None, typer.Option(min=1, max=65535, help="Listen port.")]
HealthTimeout = Annotated[int | None, typer.Option(
    min=1, help="Seconds to wait for /health (default: the profile's health_timeout_s).")]
NpuSmi = Annotated[str | None, typer.Option(
    "--npu-smi", metavar="PATH",
    help=f"npu-smi to run (default: npu-smi on PATH, else {DEFAULT_NPU_SMI}).")]

# --- load (bench, tune) --------------------------------------------------------------------------

ApiEndpoint = Annotated[str, typer.Option(help=f"API to load: {' or '.join(ENDPOINTS)}.")]
# No ranges on these: BenchConfig.check refuses a bad value (exit 2, before any request) with a
# message that names it, the same for bench and tune.
NumPrompts = Annotated[int, typer.Option(help="Measured requests per run.")]
InputLen = Annotated[int, typer.Option(
    help="Prompt tokens of the random prompts (special tokens included).")]
Warmup = Annotated[int, typer.Option(help="Warm-up requests sent first, not measured.")]
Cards = Annotated[int, typer.Option(help="NPU cards serving (multiplies per-card SLO targets).")]
Telemetry = Annotated[bool, typer.Option(
    help="Sample this host's npu-smi while measuring, when found (power, AICore, HBM; tokens "
    "per joule).")]

# --- Ansible runs (deploy, fleet status) ---------------------------------------------------------

Inventory = Annotated[list[str] | None, typer.Option(
    "-i", "--inventory", metavar="INVENTORY",
    help="Inventory file or directory; repeatable (default: the project's "
    "inventories/local/hosts.yml; required without a project checkout).")]
Limit = Annotated[str | None, typer.Option(
    "-l", "--limit", metavar="PATTERN", help="Only these hosts (Ansible's --limit).")]
RunDir = Annotated[Path | None, typer.Option(
    "--run-dir", metavar="DIR",
    help="Where to keep this run's event log and artifacts (new or empty; default "
    ".ascend-serve/runs/<UTC time>-<playbook>).")]


# --- values --------------------------------------------------------------------------------------


def positive_ints(text: str, option: str) -> list[int]:
    """``"1,2,4"`` → ``[1, 2, 4]`` (duplicates dropped, order kept) for ``option``; raises
    ``ValueError`` naming the option."""
    values: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            value = int(part)
        except ValueError as exc:
            raise ValueError(f"{option} {part!r} is not a whole number") from exc
        if value < 1:
            raise ValueError(f"{option} must be at least 1, not {value}")
        if value not in values:
            values.append(value)
    if not values:
        raise ValueError(f"{option} needs at least one number (e.g. 8 or 1,2,4,8)")
    return values


def int_list(text: str, option: str) -> list[int]:
    """:func:`positive_ints` for a command: a bad list is :func:`fail` (exit 2)."""
    try:
        return positive_ints(text, option)
    except ValueError as exc:
        raise fail(str(exc)) from exc

