"""What one host of a PD engine runs: its side's profile and its launcher script.

A host of a PD engine runs ``data_local`` ``vllm serve`` ranks, as vllm-ascend's
``examples/external_online_dp/launch_online_dp.py`` (v0.23.0) starts them: rank ``i`` of the
host sees NPUs ``[i x tp, (i + 1) x tp)`` (``ASCEND_RT_VISIBLE_DEVICES``), serves on
``port + i`` and is data-parallel rank ``dp_rank_start + i``. Each rank's command line is
:func:`ascend_serve.serving.router.vllm_serve_argv` (the one home of the per-rank command), with
the side's flags from :func:`side_profile`. The script stops the host's other ranks and exits
when one rank exits: a data-parallel group does not serve with a rank missing.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence

from ascend_serve.serving.profiles import Profile, ProfileError, merge
from ascend_serve.serving.router import PdEngine, PdNode, vllm_serve_argv

WILDCARD = "0.0.0.0"  # noqa: S104 - each rank listens on all addresses, as the tutorials


def side_profile(profile: Profile, side: str) -> Profile:
    """The profile of one side of a PD profile, as a plain (non-PD) profile: the side's layout
    as ``parallel`` and ``nodes`` (one engine), its flags and environment merged over the
    profile's. The memory fit reads it."""
    layout = profile.pd
    if layout is None:
        raise ProfileError(f"profile {profile.name} is not a PD profile")
    part = layout.side(side)
    raw = profile.model_dump(mode="json", exclude={"pd", "parallel", "nodes"})
    raw["vllm"] = {k: v for k, v in merge(profile.vllm, part.vllm).items() if v is not None}
    raw["env"] = {**profile.env, **part.env}
    raw["nodes"] = part.nodes
    raw["parallel"] = {"tensor": part.tensor, "data": part.data, "data_local": part.data_local,
                       "expert": part.expert, "rpc_port": part.rpc_port}
    return Profile.model_validate(raw)


def flag_args(profile: Profile) -> list[str]:
    """The profile's own ``vllm serve`` flags (served name, expert parallel, parsers, ``vllm``),
    written as the launcher template writes them: true a bare flag, false or null none, a
    mapping as JSON, a list as repeated values."""
    argv = ["--served-model-name", profile.model.served_name]
    if profile.parallel.expert:
        argv.append("--enable-expert-parallel")
    if profile.reasoning_parser:
        argv += ["--reasoning-parser", profile.reasoning_parser]
    if profile.tool_call_parser:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", profile.tool_call_parser]
    for key, value in sorted(profile.vllm.items()):
        if value is True:
            argv.append(f"--{key}")
        elif value is False or value is None:
            continue
        elif isinstance(value, Mapping):
            argv += [f"--{key}", json.dumps(value)]
        elif isinstance(value, (list, tuple)):
            argv += [f"--{key}", *(str(item) for item in value)]
        else:
            argv += [f"--{key}", str(value)]
    return argv


def rank_argvs(profile: Profile, engine: PdEngine, node: PdNode, *, model_path: str,
               vllm: str, dp_address: str) -> list[list[str]]:
    """Every rank's command line on ``node`` of ``engine``, listening on all addresses."""
    side = side_profile(profile, engine.role)
    listen = PdNode(WILDCARD, node.npus, node.dp_rank_start, node.dp_size_local,
                    node.vllm_start_port)
    out = []
    for index in range(node.dp_size_local):
        argv = vllm_serve_argv(engine, listen, index, model=model_path, dp_address=dp_address,
                               dp_rpc_port=side.parallel.rpc_port, extra_args=flag_args(side))
        out.append([vllm, *argv[1:]])
    return out


def host_script(profile: Profile, engine: PdEngine, node_index: int, *, model_path: str,
                vllm: str, dp_address: str, state_dir: str, set_env: Sequence[str] = (),
                env_files: Sequence[str] = (), rendered_by: str = "ascend-serve") -> str:
    """The bash script host ``node_index`` of ``engine`` runs (every rank, in the background)."""
    node = engine.nodes[node_index]
    side = side_profile(profile, engine.role)
    width = engine.ports_per_rank
    lines = [
        "#!/bin/bash",
        f"# PD launcher of serving profile {profile.name}: {engine.role} engine {engine.name}, "
        f"host {node_index} of {len(engine.nodes)}",
        f"# (data-parallel ranks {node.dp_rank_start}-{node.dp_rank_start + node.dp_size_local - 1}"
        f" of {engine.dp_size}, TP{engine.tp_size}). Rendered by {rendered_by}; edits here are "
        "overwritten.",
        "set -eo pipefail",
    ]
    for script in set_env:
        lines += ["# shellcheck disable=SC1090", f"source {shlex.quote(script)}"]
    for path in env_files:
        lines += ["set -a", "# shellcheck disable=SC1090", f". {shlex.quote(path)}", "set +a"]
    lines.append("# The side's environment (the profile's, then the side's own).")
    lines += [f"export {key}={shlex.quote(value)}" for key, value in sorted(side.env.items())]
    if "VLLM_ENGINE_READY_TIMEOUT_S" not in side.env:
        lines.append(f"export VLLM_ENGINE_READY_TIMEOUT_S={side.health_timeout_s}")
    cache = f"{state_dir}/cache"
    lines += [f"export VLLM_CACHE_ROOT={shlex.quote(cache)}",
              f"export TORCHINDUCTOR_CACHE_DIR={shlex.quote(cache + '/inductor')}",
              'mkdir -p "$VLLM_CACHE_ROOT" "$TORCHINDUCTOR_CACHE_DIR"',
              "pids=()"]
    argvs = rank_argvs(profile, engine, node, model_path=model_path, vllm=vllm,
                       dp_address=dp_address)
    for index, argv in enumerate(argvs):
        devices = ",".join(str(d) for d in range(index * width, (index + 1) * width))
        lines += [f"# rank {node.dp_rank_start + index}: NPUs {devices}, port "
                  f"{node.vllm_start_port + index}",
                  f"ASCEND_RT_VISIBLE_DEVICES={devices} {shlex.join(argv)} &",
                  'pids+=("$!")']
    lines += [
        "# One rank gone stops the others: the data-parallel group restarts as a whole.",
        "set +e",
        'wait -n "${pids[@]}"',
        "status=$?",
        'kill "${pids[@]}" 2>/dev/null',
        "wait",
        'exit "$(( status == 0 ? 1 : status ))"',
    ]
    return "\n".join(lines) + "\n"


