"""The vLLM launcher script of a profile on one node, from ``templates/vllm-launch.sh.j2``.

The same template is rendered here (``ascend-serve serve``) and by the ``vllm_service`` role's
``ansible.builtin.template`` task (the systemd unit's ``ExecStart``), from the same context
(:func:`context`, exposed to Ansible as the filter ``ascend_serve.fleet.vllm_launch_context``).
The Jinja2 settings below are Ansible's template defaults, so both produce the same bytes.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2

from ascend_serve.resources import template_path
from ascend_serve.serving.profiles import Profile, ProfileError

LAUNCHER_TEMPLATE = "vllm-launch.sh.j2"
# Where the model_store role stages models (<dir>/<profile model name>).
DEFAULT_MODELS_DIR = Path("/var/lib/ascend-serve/models")


def default_state_dir(profile: str) -> Path:
    """Where ``ascend-serve serve`` keeps a profile's launcher, log and vLLM's caches:
    ``$XDG_STATE_HOME/ascend-serve/<profile>`` (``~/.local/state`` without it)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "ascend-serve" / profile


def node_layout(profile: Profile, rank: int = 0, head_address: str | None = None) -> dict[str, Any]:
    """This node's part of a (multi-node) profile: head or headless, first data-parallel rank."""
    if profile.pd is not None:
        raise ProfileError(
            f"profile {profile.name} is a prefill/decode (PD) profile: each of its hosts runs "
            "its engine's ranks (ascend_serve.serving.pd_launch), not this launcher; deploy it "
            "with ascend-serve k8s render")
    if not 0 <= rank < profile.nodes:
        raise ProfileError(
            f"profile {profile.name} runs on {profile.nodes} node(s): node rank {rank} is out of "
            f"range 0..{profile.nodes - 1}"
        )
    if profile.nodes > 1 and not head_address:
        raise ProfileError(
            f"profile {profile.name} spans {profile.nodes} nodes: the head node's address "
            "(data-parallel address) is required"
        )
    data_local = profile.parallel.data_local or profile.parallel.data
    return {
        "rank": rank,
        "role": "head" if rank == 0 else "headless",
        "head_address": head_address or "",
        "start_rank": rank * data_local,
    }


def context(
    profile: Profile,
    *,
    model_path: str,
    vllm: str,
    state_dir: str,
    rank: int = 0,
    head_address: str | None = None,
    set_env: Sequence[str] = (),
    env_files: Sequence[str] = (),
    rendered_by: str = "ascend-serve",
) -> dict[str, Any]:
    """Everything the launcher template reads, as plain data."""
    return {
        "profile": profile.as_dict(),
        "node": node_layout(profile, rank, head_address),
        "launch": {
            "model_path": model_path,
            "vllm": vllm,
            "state_dir": state_dir,
            "set_env": list(set_env),
            "env_files": list(env_files),
            "rendered_by": rendered_by,
        },
    }


def health_url(profile: Profile) -> str:
    """Where a client on this host reaches the profile's server (wildcards -> loopback)."""
    wildcard = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}  # noqa: S104 - to loopback
    host = wildcard.get(profile.host, profile.host)
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{profile.port}"


def environment(templates_dir: Path | None = None) -> jinja2.Environment:
    """Jinja2 with Ansible's template defaults and the filters the template uses."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir or template_path())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701 - a shell script, quoted with the quote filter
    )
    # Ansible's own filters of the same names: shlex quoting, json.dumps with its defaults.
    env.filters["quote"] = lambda value: shlex.quote(str(value))
    env.filters["to_json"] = lambda value: json.dumps(value)
    return env


def render(ctx: dict[str, Any], templates_dir: Path | None = None) -> str:
    """The launcher script for ``ctx`` (from :func:`context`)."""
    return environment(templates_dir).get_template(LAUNCHER_TEMPLATE).render(**ctx)


def command_line(script: str) -> str:
    """The ``exec ...`` command of a rendered launcher, joined into one line (for display)."""
    lines = script.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("exec ")), None)
    if start is None:
        raise ValueError("the launcher has no exec line")
    parts = []
    for line in lines[start:]:
        parts.append(line.strip().removesuffix("\\").strip())
        if not line.rstrip().endswith("\\"):
            break
    return " ".join(p for p in parts if p and p != '"$@"').removeprefix("exec ")
