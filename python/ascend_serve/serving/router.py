"""The vLLM router in front of a fleet: its command line, and the checks on a PD layout.

The router is ``vllm-router`` (vllm-project/router, PyPI ``vllm-router``), a Rust binary with a
Python launcher. What this module builds and refuses follows the sources cited in
``docs/pd-disaggregation.md``:

- Workers are URLs. In the vllm-ascend PD tutorials each data-parallel rank is its own
  ``vllm serve`` on its own port (``launch_online_dp.py``: ``--port = vllm-start-port + i``), so a
  PD worker is a host x rank port, never a host (:func:`rank_workers`).
- The router's PD mode is ``--vllm-pd-disaggregation`` with ``--prefill URL`` and ``--decode URL``
  per worker. Its default ``--kv-connector nixl`` exchange (prefill request with
  ``kv_transfer_params.do_remote_decode``, ``max_tokens`` 1, then the prefill answer's
  ``kv_transfer_params`` passed to decode) is the exchange vllm-ascend's Mooncake connectors
  answer; ``--kv-connector mooncake`` speaks upstream vLLM's bootstrap-server exchange, which
  vllm-ascend's connectors do not serve, so it is never rendered here.
- ``--api-key`` is the key the router sends to its workers. vllm-router 0.1.17's command line has
  no setting that authenticates clients; keeping workers off the client network is the
  deployment's job.
- A Mooncake engine listens on handshake ports from ``kv_port``: rank ``r`` of an engine with
  tensor x pipeline x prefill-context parallel size ``w`` takes ``[kv_port + r*w,
  kv_port + (r+1)*w)`` (vllm-ascend v0.23.0 ``mooncake_connector.py``: ``side_channel_port``).
  The Ascend transport takes random ports in ``[20000, 20000 + NPUs per node x 1000)``
  (``pd_disaggregation_mooncake_multi_node.md``, "kv_port Configuration Guide").

Every refusal is a :class:`RouterPlanError` whose message names the values that clash and the fix;
:func:`check_pd` collects all of them before anything is rendered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

# vllm-router 0.1.17 (router_args.py, --policy choices) lists more; these are the ones the
# project renders: the three the issue names.
POLICIES = ("cache_aware", "power_of_two", "round_robin")
Role = Literal["prefill", "decode"]
KV_ROLES: dict[str, str] = {"prefill": "kv_producer", "decode": "kv_consumer"}
# pd_disaggregation_mooncake_multi_node.md (vllm-ascend v0.23.0), "kv_port Configuration Guide".
TRANSPORT_BASE_PORT = 20000
TRANSPORT_PORTS_PER_NPU = 1000
MAX_PORT = 65535


class RouterPlanError(ValueError):
    """A router or PD layout that cannot work; the message names the values and the fix."""


@dataclass(frozen=True)
class Worker:
    """One OpenAI-compatible endpoint the router sends requests to."""

    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


@dataclass(frozen=True)
class RouterSettings:
    """The router's own flags (vllm-router 0.1.17 names; ``None`` keeps the router's default)."""

    host: str = "127.0.0.1"
    port: int = 30000
    policy: str = "cache_aware"
    prometheus_host: str = "127.0.0.1"
    prometheus_port: int = 29000
    retry_max_retries: int | None = None
    cb_failure_threshold: int | None = None
    cb_success_threshold: int | None = None
    cb_timeout_duration_secs: int | None = None
    health_check_interval_secs: int | None = None
    health_failure_threshold: int | None = None
    request_timeout_secs: int | None = None


@dataclass(frozen=True)
class PdNode:
    """One host of a PD engine: ``launch_online_dp.py``'s per-node options."""

    host: str
    npus: int  # NPUs on this host (the transport's range depends on it)
    dp_rank_start: int
    dp_size_local: int
    vllm_start_port: int


@dataclass(frozen=True)
class PdEngine:
    """One prefill or decode instance: a data-parallel group of ``vllm serve`` ranks."""

    name: str
    role: Role
    kv_port: int
    dp_size: int
    tp_size: int
    nodes: tuple[PdNode, ...]
    # kv_connector_extra_config: {"prefill": {"dp_size", "tp_size"}, "decode": {...}}
    extra_config: dict[str, dict[str, int]]
    engine_id: str | None = None
    connector: str = "MooncakeConnectorV1"
    pp_size: int = 1
    pcp_size: int = 1
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def ports_per_rank(self) -> int:
        return self.tp_size * self.pp_size * self.pcp_size


def _check_settings(settings: RouterSettings) -> None:
    if settings.policy not in POLICIES:
        raise RouterPlanError(
            f"router policy {settings.policy!r} is not one of {', '.join(POLICIES)}: "
            "choose one of those")
    if settings.port == settings.prometheus_port and settings.host == settings.prometheus_host:
        raise RouterPlanError(
            f"router port {settings.port} is also its metrics port on {settings.host}: "
            "give prometheus_port another port")


def _settings_argv(settings: RouterSettings, api_key: str | None) -> list[str]:
    argv = ["--host", settings.host, "--port", str(settings.port), "--policy", settings.policy,
            "--prometheus-host", settings.prometheus_host,
            "--prometheus-port", str(settings.prometheus_port)]
    optional = {
        "--retry-max-retries": settings.retry_max_retries,
        "--cb-failure-threshold": settings.cb_failure_threshold,
        "--cb-success-threshold": settings.cb_success_threshold,
        "--cb-timeout-duration-secs": settings.cb_timeout_duration_secs,
        "--health-check-interval-secs": settings.health_check_interval_secs,
        "--health-failure-threshold": settings.health_failure_threshold,
        "--request-timeout-secs": settings.request_timeout_secs,
    }
    for flag, value in optional.items():
        if value is not None:
            argv += [flag, str(value)]
    if api_key:
        argv += ["--api-key", api_key]
    return argv


def _unique(workers: Sequence[Worker], what: str) -> None:
    seen: set[str] = set()
    for worker in workers:
        if worker.url in seen:
            raise RouterPlanError(f"{what} lists {worker.url} twice: list each worker once")
        seen.add(worker.url)


def _regular_worker_args(workers: Sequence[Worker]) -> list[str]:
    return ["--worker-urls", *(w.url for w in workers)]


def _pd_worker_args(prefill: Sequence[Worker], decode: Sequence[Worker]) -> list[str]:
    args: list[str] = []
    for worker in prefill:
        args += ["--prefill", worker.url]
    for worker in decode:
        args += ["--decode", worker.url]
    return args


def _check_pd_sides(prefill: Sequence[Worker], decode: Sequence[Worker]) -> None:
    if not prefill and not decode:
        raise RouterPlanError(
            "the PD router has no workers: give it the prefill and decode groups")
    if prefill and not decode:
        raise RouterPlanError(
            f"the PD router has {len(prefill)} prefill worker(s) and no decode worker: add the "
            "decode group (a prefill engine only hands its KV cache to a decode engine)")
    if decode and not prefill:
        raise RouterPlanError(
            f"the PD router has {len(decode)} decode worker(s) and no prefill worker: add the "
            "prefill group")


def router_argv(executable: str, workers: Sequence[Worker], settings: RouterSettings,
                api_key: str | None = None) -> list[str]:
    """``vllm-router`` in regular mode over ``workers`` (each a replica's URL)."""
    _check_settings(settings)
    if not workers:
        raise RouterPlanError(
            "the router has no workers: give it the serving hosts (or, in PD mode, the prefill "
            "and decode groups) or do not deploy it")
    _unique(workers, "the router's worker list")
    return [executable, *_regular_worker_args(workers), *_settings_argv(settings, api_key)]


def pd_router_argv(executable: str, prefill: Sequence[Worker], decode: Sequence[Worker],
                   settings: RouterSettings, api_key: str | None = None) -> list[str]:
    """``vllm-router --vllm-pd-disaggregation`` over prefill and decode rank workers.

    No ``--kv-connector``: the router's default (``nixl``) is the two-step ``kv_transfer_params``
    exchange vllm-ascend's Mooncake connectors answer (see the module's docstring).
    """
    _check_settings(settings)
    _check_pd_sides(prefill, decode)
    _unique([*prefill, *decode], "the PD router's worker lists")
    return [executable, "--vllm-pd-disaggregation", *_pd_worker_args(prefill, decode),
            *_settings_argv(settings, api_key)]


# --- the router as a service: workers from inventory hosts, drained hosts left out -------------

MODES = ("regular", "pd")
# What a systemd unit line may carry unquoted: no whitespace, quotes, ``%``, ``$``, ``\\`` or ``;``.
_UNIT_SAFE = re.compile(r"^[A-Za-z0-9._:/\[\]=,@+-]+$")


@dataclass(frozen=True)
class WorkerHost:
    """An inventory host that serves the router: its name, the address the router reaches it at
    and one port per ``vllm serve`` it runs (a data-parallel rank each, in the PD tutorials)."""

    name: str
    address: str
    ports: tuple[int, ...]

    def workers(self) -> list[Worker]:
        return [Worker(self.address, port) for port in self.ports]


@dataclass(frozen=True)
class RouterPlan:
    """What the router role renders: the unit's command line (the workers come from an
    environment variable, so that a drain changes one file and survives a restart) and the
    workers, per host."""

    argv: list[str]  # the executable, the mode, the router's own flags, the key reference
    worker_args: list[str]  # ``--worker-urls ...`` or ``--prefill ... --decode ...``
    workers: dict[str, list[str]]  # every worker host -> its URLs, drained ones included
    active: list[str]  # the URLs the router starts with
    drained: list[str]  # worker hosts left out (in the order given)
    unknown_drained: list[str]  # drained names that are no worker host of this router

    @property
    def workers_env(self) -> str:
        """The environment file the unit reads its workers from (``$ROUTER_WORKER_ARGS``)."""
        return f'ROUTER_WORKER_ARGS="{" ".join(self.worker_args)}"\n'


def _check_hosts(hosts: Sequence[WorkerHost], group: str, router: str) -> list[str]:
    problems: list[str] = []
    for host in hosts:
        if not host.address or not _UNIT_SAFE.match(host.address):
            problems.append(f"router {router}: worker host {host.name} of group {group!r} has "
                            f"the address {host.address!r}: give it a host name or IP address "
                            "(router_worker_address)")
        if not host.ports:
            problems.append(f"router {router}: worker host {host.name} of group {group!r} has "
                            "no port: set router_worker_ports (one per vllm serve rank) or a "
                            "vllm_service_profile")
        for port in host.ports:
            if not 1 <= port <= MAX_PORT:
                problems.append(f"router {router}: worker host {host.name} of group {group!r}: "
                                f"port {port} is outside 1-{MAX_PORT}: fix router_worker_ports")
        if len(set(host.ports)) != len(host.ports):
            problems.append(f"router {router}: worker host {host.name} of group {group!r} lists "
                            f"a port twice ({list(host.ports)}): list each rank's port once")
    return problems


def service_plan(router: str, mode: str, executable: str, settings: RouterSettings, *,
                 hosts: Sequence[WorkerHost] = (), prefill: Sequence[WorkerHost] = (),
                 decode: Sequence[WorkerHost] = (), drained: Iterable[str] = (),
                 groups: Mapping[str, str] | None = None,
                 api_key_ref: str | None = None) -> RouterPlan:
    """The router ``router`` as a service over inventory hosts, less the ``drained`` ones.

    ``mode`` ``regular`` uses ``hosts`` (replicas); ``pd`` uses ``prefill`` and ``decode``.
    ``groups`` names the inventory group of each list for the messages (keys ``hosts``,
    ``prefill``, ``decode``). ``api_key_ref`` is what the command line carries after
    ``--api-key`` (the role passes ``${OPENAI_API_KEY}``, which systemd expands from the key's
    environment file, so the key is in no file but that one). Every problem is in one error,
    before anything is written. A router whose every worker is drained is rendered with none
    (vllm-router 0.1.17 starts and answers 503 "No workers are currently available").
    """
    names = {"hosts": "hosts", "prefill": "prefill", "decode": "decode", **(groups or {})}
    if mode not in MODES:
        raise RouterPlanError(f"router {router}: mode {mode!r} is not one of {', '.join(MODES)}")
    try:
        _check_settings(settings)
    except RouterPlanError as exc:
        raise RouterPlanError(f"router {router}: {exc}") from exc
    problems: list[str] = []
    if mode == "regular":
        sides = {"hosts": list(hosts)}
        if not hosts:
            problems.append(
                f"router {router}: no workers: the worker group {names['hosts']!r} has no hosts "
                "(set router_worker_group to the group whose hosts run vllm_service, or do not "
                "put this host in the router group)")
    else:
        sides = {"prefill": list(prefill), "decode": list(decode)}
        for side in ("prefill", "decode"):
            if not sides[side]:
                other = "decode" if side == "prefill" else "prefill"
                problems.append(
                    f"router {router}: PD mode with no {side} workers: the group "
                    f"{names[side]!r} has no hosts"
                    + (f" while {names[other]!r} has {len(sides[other])}" if sides[other]
                       else "") + f" (set router_{side}_group, or use router_mode regular)")
    for side, side_hosts in sides.items():
        problems += _check_hosts(side_hosts, names[side], router)
    all_hosts = [h for side_hosts in sides.values() for h in side_hosts]
    seen: dict[str, str] = {}
    for host in all_hosts:
        for worker in host.workers():
            if worker.url in seen:
                problems.append(f"router {router}: worker {worker.url} is both {seen[worker.url]}"
                                f" and {host.name}'s: list each worker once")
            seen.setdefault(worker.url, host.name)
    if problems:
        raise RouterPlanError("; ".join(problems))

    out = [str(name) for name in drained]
    known = {h.name for h in all_hosts}
    left = {side: [w for h in side_hosts if h.name not in out for w in h.workers()]
            for side, side_hosts in sides.items()}
    if mode == "regular":
        worker_args = _regular_worker_args(left["hosts"])
        argv = [executable]
    else:
        worker_args = _pd_worker_args(left["prefill"], left["decode"])
        argv = [executable, "--vllm-pd-disaggregation"]
    argv += _settings_argv(settings, api_key_ref)
    for arg in [*argv, *worker_args]:
        if arg != api_key_ref and not _UNIT_SAFE.match(arg):
            raise RouterPlanError(f"router {router}: {arg!r} cannot stand unquoted on a systemd "
                                  "command line: use plain paths, host names and numbers")
    return RouterPlan(
        argv=argv, worker_args=worker_args,
        workers={h.name: [w.url for w in h.workers()] for h in all_hosts},
        active=[w.url for ws in left.values() for w in ws],
        drained=[n for n in out if n in known],
        unknown_drained=[n for n in out if n not in known])


# --- PD layout --------------------------------------------------------------------------------


def rank_workers(engine: PdEngine) -> list[Worker]:
    """The engine's workers: one per data-parallel rank, ``vllm_start_port + i`` on each host."""
    return [Worker(node.host, node.vllm_start_port + i)
            for node in engine.nodes for i in range(node.dp_size_local)]


def handshake_ports(engine: PdEngine, node: PdNode) -> range:
    """The Mooncake handshake ports the engine's ranks on ``node`` listen on."""
    width = engine.ports_per_rank
    first = engine.kv_port + node.dp_rank_start * width
    return range(first, first + node.dp_size_local * width)


def transport_ports(npus: int) -> range:
    """The ports the Ascend transport may take at random on a host with ``npus`` NPUs."""
    return range(TRANSPORT_BASE_PORT, TRANSPORT_BASE_PORT + npus * TRANSPORT_PORTS_PER_NPU)


def _span(ports: range) -> str:
    return f"[{ports.start}, {ports.stop})"


def _overlaps(a: range, b: range) -> bool:
    return a.start < b.stop and b.start < a.stop


def _engine_problems(engine: PdEngine) -> list[str]:
    problems: list[str] = []
    name = f"{engine.role} engine {engine.name}"
    if engine.dp_size < 1 or engine.tp_size < 1:
        problems.append(f"{name}: dp_size {engine.dp_size} and tp_size {engine.tp_size} must be "
                        "at least 1")
        return problems
    if not engine.nodes:
        problems.append(f"{name} has no hosts: give it at least one")
        return problems
    ranks: dict[int, str] = {}
    for node in engine.nodes:
        if node.dp_size_local < 1:
            problems.append(f"{name} on {node.host}: dp_size_local {node.dp_size_local} must be "
                            "at least 1")
            continue
        used = node.dp_size_local * engine.ports_per_rank
        if used > node.npus:
            problems.append(
                f"{name} on {node.host}: {node.dp_size_local} rank(s) x {engine.ports_per_rank} "
                f"NPU(s) = {used} NPUs, but the host has {node.npus}: lower dp_size_local or "
                "tp_size")
        for rank in range(node.dp_rank_start, node.dp_rank_start + node.dp_size_local):
            if rank >= engine.dp_size or rank < 0:
                problems.append(f"{name} on {node.host}: rank {rank} is outside [0, "
                                f"{engine.dp_size}) (dp_size {engine.dp_size}): fix "
                                "dp_rank_start or dp_size_local")
            elif rank in ranks:
                problems.append(f"{name}: rank {rank} is on both {ranks[rank]} and {node.host}: "
                                "give each host its own dp_rank_start")
            else:
                ranks[rank] = node.host
    missing = sorted(set(range(engine.dp_size)) - set(ranks))
    if missing and not problems:
        problems.append(f"{name}: ranks {missing} of dp_size {engine.dp_size} are on no host: "
                        "add hosts or lower dp_size")
    for side in ("prefill", "decode"):
        declared = engine.extra_config.get(side)
        if declared is None:
            problems.append(f"{name}: kv_connector_extra_config has no {side!r} entry: add "
                            f"{{\"dp_size\": .., \"tp_size\": ..}} for the {side} side")
    return problems


def check_pd(engines: Sequence[PdEngine]) -> None:
    """Refuse a PD layout that cannot start or cannot transfer; every problem in one error."""
    problems: list[str] = []
    prefill = [e for e in engines if e.role == "prefill"]
    decode = [e for e in engines if e.role == "decode"]
    if prefill and not decode:
        problems.append(f"prefill group {', '.join(e.name for e in prefill)} has no decode "
                        "group: add a decode group (or serve without PD)")
    if decode and not prefill:
        problems.append(f"decode group {', '.join(e.name for e in decode)} has no prefill "
                        "group: add a prefill group (or serve without PD)")
    for engine in engines:
        problems += _engine_problems(engine)

    # Each side's declared layout against every engine of that side.
    for engine in engines:
        for side, group in (("prefill", prefill), ("decode", decode)):
            declared = engine.extra_config.get(side)
            if declared is None:  # named above
                continue
            for other in group:
                actual = {"dp_size": other.dp_size, "tp_size": other.tp_size}
                wrong = {k: declared.get(k) for k in actual if declared.get(k) != actual[k]}
                if wrong:
                    problems.append(
                        f"{engine.role} engine {engine.name}: kv_connector_extra_config {side} "
                        f"{json.dumps({k: declared.get(k) for k in actual})} but {side} engine "
                        f"{other.name} runs dp_size {other.dp_size}, tp_size {other.tp_size}: "
                        f"set {side} to {json.dumps(actual)}")

    ids: dict[str, str] = {}
    for engine in engines:
        if engine.engine_id is None:
            continue
        if engine.engine_id in ids:
            problems.append(f"engine_id {engine.engine_id!r} is used by {ids[engine.engine_id]} "
                            f"and {engine.name}: give each engine its own engine_id")
        else:
            ids[engine.engine_id] = engine.name

    taken: dict[str, list[tuple[range, str]]] = {}
    for engine in engines:
        for node in engine.nodes:
            ports = handshake_ports(engine, node)
            label = f"{engine.role} engine {engine.name} on {node.host}"
            if ports.stop - 1 > MAX_PORT:
                problems.append(f"{label}: kv ports {_span(ports)} go past {MAX_PORT}: lower "
                                f"kv_port {engine.kv_port}")
            reserved = transport_ports(node.npus)
            if _overlaps(ports, reserved):
                problems.append(
                    f"{label}: kv ports {_span(ports)} (kv_port {engine.kv_port}) overlap the "
                    f"Ascend transport's {_span(reserved)} for {node.npus} NPUs: set kv_port to "
                    f"{reserved.stop} or more")
            api = range(node.vllm_start_port, node.vllm_start_port + node.dp_size_local)
            for kind, span in (("kv ports", ports), ("API ports", api)):
                for other_span, other_label in taken.get(node.host, []):
                    if _overlaps(span, other_span):
                        problems.append(f"{label}: {kind} {_span(span)} overlap {other_label}: "
                                        "move one of them (kv_port or vllm_start_port)")
            taken.setdefault(node.host, []).extend(
                [(ports, f"kv ports {_span(ports)} of {label}"),
                 (api, f"API ports {_span(api)} of {label}")])
    if problems:
        raise RouterPlanError("; ".join(problems))


def kv_transfer_config(engine: PdEngine) -> dict[str, object]:
    """The engine's ``--kv-transfer-config`` (tutorial keys; ``kv_port`` as the tutorials give
    it, a string)."""
    config: dict[str, object] = {"kv_connector": engine.connector,
                                 "kv_role": KV_ROLES[engine.role],
                                 "kv_port": str(engine.kv_port)}
    if engine.engine_id is not None:
        config["engine_id"] = engine.engine_id
    config["kv_connector_extra_config"] = {
        side: dict(engine.extra_config[side]) for side in ("prefill", "decode")}
    config.update(engine.extra)
    return config


def vllm_serve_argv(engine: PdEngine, node: PdNode, local_index: int, *, model: str,
                    dp_address: str, dp_rpc_port: int,
                    extra_args: Iterable[str] = ()) -> list[str]:
    """One rank's ``vllm serve`` as ``run_dp_template.sh`` gets it from ``launch_online_dp.py``
    (port, DP size/rank/address/RPC port, TP size), with the engine's kv-transfer config."""
    if not 0 <= local_index < node.dp_size_local:
        raise RouterPlanError(f"{engine.name} on {node.host}: local rank {local_index} is outside "
                              f"[0, {node.dp_size_local})")
    return ["vllm", "serve", model, "--host", node.host,
            "--port", str(node.vllm_start_port + local_index),
            "--data-parallel-size", str(engine.dp_size),
            "--data-parallel-rank", str(node.dp_rank_start + local_index),
            "--data-parallel-address", dp_address,
            "--data-parallel-rpc-port", str(dp_rpc_port),
            "--tensor-parallel-size", str(engine.tp_size),
            *extra_args,
            "--kv-transfer-config", json.dumps(kv_transfer_config(engine), sort_keys=True)]


def pd_router_workers(engines: Sequence[PdEngine]) -> tuple[list[Worker], list[Worker]]:
    """(prefill workers, decode workers) of a checked PD layout."""
    check_pd(engines)
    prefill = [w for e in engines if e.role == "prefill" for w in rank_workers(e)]
    decode = [w for e in engines if e.role == "decode" for w in rank_workers(e)]
    return prefill, decode
