"""Everything ``k8s render`` checks and decides before any object is built.

:func:`make_plan` resolves the profile, refuses what cannot serve (exit codes from
:mod:`ascend_serve.exitcodes`, nothing written), picks the version set and its image, reads or
builds the rank table when one is given (none is required: vLLM's data-parallel serving and
vllm-ascend's PD connectors read none), and renders one launcher per node rank from the
vllm_service role's template (:mod:`ascend_serve.serving.launcher`), with the same context the
role gives it: the container runs the systemd unit's launcher, byte for byte apart from its
"rendered by" line. A PD profile gets one launcher per host of each engine
(:mod:`ascend_serve.serving.pd_launch`, every rank's command from the router module's
``vllm_serve_argv``) and the PD router's command line, after its layout is checked again on
the LeaderWorkerSets' pod names.

Paths inside the container are the node's paths under the roles' defaults, so the command line
is the same: the model at ``/var/lib/ascend-serve/models/<model name>`` (the model_store role's
layout, ``launcher.DEFAULT_MODELS_DIR``), vLLM's state in ``/var/lib/ascend-serve/vllm``
(``vllm_service_state_dir``), the launchers in ``/etc/ascend-serve/vllm``
(``vllm_service_config_dir``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field

from ascend_serve.exitcodes import EXIT_BAD_INPUT, EXIT_CHECK_FAILED
from ascend_serve.k8s import ascend
from ascend_serve.network.netplan import NetPlanError, plan
from ascend_serve.network.ranktable import RankTableError, build, rank_count, read, validate
from ascend_serve.serving import launcher
from ascend_serve.serving import pd as pd_layout
from ascend_serve.serving.nodecheck import check_fit
from ascend_serve.serving.pd_launch import host_script, side_profile
from ascend_serve.serving.profiles import (
    Profile,
    ProfileError,
    resolve_options,
    serves,
    set_problems,
)
from ascend_serve.serving.router import RouterPlanError, RouterSettings, pd_router_argv
from ascend_serve.stack.matrix import MatrixError, StackSet, load_matrix, resolve

LAUNCH_DIR = "/etc/ascend-serve/vllm"
STATE_DIR = "/var/lib/ascend-serve/vllm"
# Derived names (<name>-ranktable, the pods <name>-0-1) must stay DNS labels of 63 characters.
MAX_NAME = 40
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# The key of the API key in the operator's Secret: the variable vLLM reads (the vllm_service
# role's key file holds the same VLLM_API_KEY=... line).
API_KEY_ENV = "VLLM_API_KEY"
_WILDCARDS = ("0.0.0.0", "::", "")  # noqa: S104 - listen addresses the probes can reach
ROUTER_LISTEN = "0.0.0.0"  # noqa: S104 - the router pod's listen address


class RenderError(Exception):
    """Why nothing is rendered, with the exit code the command returns."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


class RenderOptions(BaseModel):
    """What the operator asks for (the command's options)."""

    model_config = ConfigDict(extra="forbid")

    profile: str
    assignments: list[str] = Field(default_factory=list)
    profile_files: list[Path] = Field(default_factory=list)
    name: str | None = None
    namespace: str = "default"
    stack_set: str | None = None
    image: str | None = None
    vllm: str = ascend.IMAGE_VLLM
    model_pvc: str | None = None
    model_subpath: str | None = None
    model_host_path: str | None = None
    env_files: list[str] = Field(default_factory=list)
    ranktable: Path | None = None
    ranktable_plan: Path | None = None
    host_network: bool = True
    api_key_secret: str | None = None
    # PD profiles: the router's image (one with vllm-router installed) and its executable.
    router_image: str | None = None
    router_executable: str = "vllm-router"


class PdPlan(BaseModel):
    """A PD profile's parts: one LeaderWorkerSet per side, the router in front."""

    # side -> (engines, hosts per engine): the LeaderWorkerSet's replicas and size
    groups: dict[str, tuple[int, int]]
    # launcher file name (<side>-<engine>-<host>.sh) -> script
    launchers: dict[str, str]
    # side -> the rank ports one host serves on (port, port + 1, ...)
    ports: dict[str, list[int]]
    router_image: str
    router_argv: list[str]
    prefill_workers: list[str]
    decode_workers: list[str]


class RenderPlan(BaseModel):
    """The checked inputs of the objects."""

    options: RenderOptions
    profile: Profile
    name: str
    stack_set: str | None
    image: str
    model_dir: str
    # node rank -> launcher script (rank 0: the head, which serves the API)
    launchers: dict[int, str]
    ranktable: dict[str, Any] | None
    pd: PdPlan | None = None

    @property
    def multi_node(self) -> bool:
        return self.profile.nodes > 1


def _name(options: RenderOptions, profile: Profile) -> str:
    name = options.name or profile.name.replace(".", "-").replace("_", "-")
    if not _DNS_LABEL.match(name) or len(name) > MAX_NAME:
        raise RenderError(
            f"name {name!r} is not usable for Kubernetes objects: lower-case letters, digits and "
            f"'-', starting with a letter, at most {MAX_NAME} characters (--name)")
    if not _DNS_LABEL.match(options.namespace) or len(options.namespace) > 63:
        raise RenderError(f"namespace {options.namespace!r} is not a DNS label (--namespace)")
    secret = options.api_key_secret
    if secret is not None and (not _DNS_SUBDOMAIN.match(secret) or len(secret) > 253):
        raise RenderError(f"secret name {secret!r} is not a DNS subdomain (--api-key-secret)")
    return name


def _profile(options: RenderOptions) -> Profile:
    try:
        profile = resolve_options(options.profile, options.assignments, options.profile_files)
    except ProfileError as exc:
        raise RenderError(str(exc)) from exc
    if profile.device != "npu":
        raise RenderError(
            f"profile {profile.name} serves on {profile.device}: Kubernetes manifests are "
            "rendered for NPU profiles (MindCluster's device plugin schedules the chips)")
    if profile.host not in _WILDCARDS:
        raise RenderError(
            f"profile {profile.name} listens on {profile.host}: the probes reach the pod's "
            "address, so serve on all addresses (--set host=0.0.0.0)")
    if profile.pd is None:
        fits = [("", check_fit(profile, None))]
    else:
        fits = [(f" ({side} side)", check_fit(side_profile(profile, side), None))
                for side in pd_layout.SIDES]
    for where, fit in fits:
        if not fit.ok:
            raise RenderError(f"profile {profile.name}{where} does not fit: {fit.detail}",
                              EXIT_CHECK_FAILED)
    return profile


def _stack_set(options: RenderOptions, profile: Profile) -> StackSet | None:
    try:
        matrix = load_matrix()
        if options.stack_set:
            stack = resolve(matrix, options.stack_set)
            problems = set_problems(profile, stack, matrix)
            if problems:
                raise RenderError("; ".join(problems))
            return stack
    except MatrixError as exc:
        raise RenderError(str(exc)) from exc
    if options.image:
        return None
    fitting = [s for s in matrix.sets if s.platform == "ascend" and serves(profile, s)]
    if not fitting:
        raise RenderError(f"no version set in the matrix serves profile {profile.name}: "
                          "name an image with --image")
    return max(fitting, key=lambda s: Version(s.vllm_ascend or "0"))


def _read_ranktable(path: Path) -> dict[str, Any]:
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RenderError(f"cannot read the rank table {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise RenderError(f"the rank table {path} is not JSON: {exc}") from exc
    problems = validate(table)
    if problems:
        listed = "; ".join(f"{p.path}: {p.message}" for p in problems)
        raise RenderError(f"the rank table {path} is not valid: {listed}", EXIT_CHECK_FAILED)
    if not isinstance(table, dict):  # validate() reports a non-object; this narrows the type
        raise RenderError(f"the rank table {path} is not a JSON object")
    return table


def _build_ranktable(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RenderError(f"cannot read the plan {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise RenderError(f"the plan {path} is not YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("servers"), dict):
        raise RenderError(f"the plan {path} must be a mapping with a 'servers' mapping "
                          "(as for ascend-serve ranktable generate --plan)")
    servers = data.pop("servers")
    try:
        return build(plan(data), servers)
    except NetPlanError as exc:
        raise RenderError(f"the plan {path} is not consistent: {'; '.join(exc.problems)}",
                          EXIT_CHECK_FAILED) from exc
    except RankTableError as exc:
        listed = "; ".join(f"{p.path}: {p.message}" for p in exc.problems)
        raise RenderError(f"no rank table from the plan {path}: {listed}",
                          EXIT_CHECK_FAILED) from exc


def _ranktable(options: RenderOptions, profile: Profile) -> dict[str, Any] | None:
    """The rank table to hand to the pods, when one is given: optional, because vllm-ascend's
    data-parallel and PD paths read none (docs/kubernetes.md, "Rank table")."""
    if options.ranktable and options.ranktable_plan:
        raise RenderError("--ranktable and --ranktable-plan are alternatives: give one")
    if (options.ranktable or options.ranktable_plan) and profile.pd is not None:
        raise RenderError(
            f"profile {profile.name} is a PD profile: its Mooncake connector reads no rank "
            "table, so none is mounted; leave out --ranktable / --ranktable-plan")
    if options.ranktable:
        table = _read_ranktable(options.ranktable)
    elif options.ranktable_plan:
        table = _build_ranktable(options.ranktable_plan)
    else:
        return None
    servers = read(table)["servers"]
    if len(servers) != profile.nodes:
        raise RenderError(
            f"the rank table lists {len(servers)} server(s) but profile {profile.name} runs on "
            f"{profile.nodes} node(s)", EXIT_CHECK_FAILED)
    short = [s for s in table["server_list"] if len(s.get("device", [])) < profile.chips_per_node]
    if short:
        raise RenderError(
            f"the rank table gives server {short[0].get('server_id')} "
            f"{len(short[0].get('device', []))} device(s); profile {profile.name} uses "
            f"{profile.chips_per_node} per node ({rank_count(table)} rank(s) in all)",
            EXIT_CHECK_FAILED)
    return table


def _model_source(options: RenderOptions) -> None:
    if options.model_pvc and options.model_host_path:
        raise RenderError("--model-pvc and --model-host-path are alternatives: give one")
    if options.model_subpath and not options.model_pvc:
        raise RenderError("--model-subpath goes with --model-pvc")
    for path in [options.model_host_path or "/", *options.env_files]:
        if not path.startswith("/"):
            raise RenderError(f"{path!r} is not an absolute host path")


def side_name(name: str, side: str) -> str:
    """The LeaderWorkerSet of one side of a PD plan."""
    return f"{name}-{side}"


def _pd_plan(options: RenderOptions, profile: Profile, name: str,
             model_dir: str) -> PdPlan:
    layout = profile.pd
    assert layout is not None
    if not options.router_image:
        raise RenderError(
            f"profile {profile.name} is a PD profile: its router is vllm-router, which "
            "vllm-ascend's image does not carry; name an image with it installed "
            "(--router-image, e.g. one built with pip install vllm-router)")
    # Each host of an engine is one pod: engine e of a side is group e of that side's
    # LeaderWorkerSet, host n its pod of worker index n (the leader n = 0).
    hosts: dict[str, list[list[str]]] = {}
    for side in pd_layout.SIDES:
        lws = side_name(name, side)
        part = layout.side(side)
        hosts[side] = [[ascend.pod_address(lws, options.namespace, e, n)
                        for n in range(part.nodes)] for e in range(part.engines)]
    try:
        engines = pd_layout.check(layout, profile.chips_per_node, hosts)
        prefill, decode = pd_layout.workers(engines)
        # The router pod serves the Service (and Prometheus) on the pod's addresses.
        settings = RouterSettings(host=ROUTER_LISTEN, port=profile.port,
                                  policy=layout.router_policy, prometheus_host=ROUTER_LISTEN)
        argv = pd_router_argv(options.router_executable, prefill, decode, settings,
                              api_key=f"$({API_KEY_ENV})" if options.api_key_secret else None)
    except RouterPlanError as exc:
        raise RenderError(f"profile {profile.name}: {exc}") from exc
    launchers: dict[str, str] = {}
    for side in pd_layout.SIDES:
        for group, engine in enumerate(e for e in engines if e.role == side):
            for index in range(len(engine.nodes)):
                script = host_script(
                    profile, engine, index, model_path=model_dir, vllm=options.vllm,
                    dp_address=ascend.leader_address(side_name(name, side), options.namespace,
                                                     group),
                    state_dir=STATE_DIR, set_env=list(ascend.IMAGE_SET_ENV),
                    env_files=options.env_files, rendered_by="ascend-serve k8s render")
                launchers[f"{side}-{group}-{index}.sh"] = script
    return PdPlan(
        groups={s: (layout.side(s).engines, layout.side(s).nodes) for s in pd_layout.SIDES},
        launchers=launchers,
        ports={s: [layout.side(s).port + i for i in range(layout.side(s).ranks_per_node)]
               for s in pd_layout.SIDES},
        router_image=options.router_image, router_argv=argv,
        prefill_workers=[w.url for w in prefill], decode_workers=[w.url for w in decode])


def make_plan(options: RenderOptions) -> RenderPlan:
    """Check ``options`` and render the launchers; raises :class:`RenderError`."""
    profile = _profile(options)
    name = _name(options, profile)
    _model_source(options)
    stack = _stack_set(options, profile)
    image = options.image or ascend.image(str(stack.vllm_ascend) if stack else "", profile.chip)
    table = _ranktable(options, profile)
    model_dir = str(launcher.DEFAULT_MODELS_DIR / profile.model.name)
    if profile.pd is not None:
        return RenderPlan(options=options, profile=profile, name=name,
                          stack_set=stack.name if stack else None, image=image,
                          model_dir=model_dir, launchers={}, ranktable=None,
                          pd=_pd_plan(options, profile, name, model_dir))
    head = ascend.leader_address(name, options.namespace) if profile.nodes > 1 else None
    launchers = {}
    for rank in range(profile.nodes):
        ctx = launcher.context(
            profile, model_path=model_dir, vllm=options.vllm, state_dir=STATE_DIR, rank=rank,
            head_address=head, set_env=list(ascend.IMAGE_SET_ENV), env_files=options.env_files,
            rendered_by="ascend-serve k8s render")
        launchers[rank] = launcher.render(ctx)
    return RenderPlan(options=options, profile=profile, name=name,
                      stack_set=stack.name if stack else None, image=image, model_dir=model_dir,
                      launchers=launchers, ranktable=table)
