"""The prefill/decode (PD) section of a serving profile: its schema, its engines, its checks.

A PD profile (``pd:`` in ``serving-profiles.yml``) describes a vllm-ascend PD deployment as its
tutorials lay it out (vllm-project/vllm-ascend v0.23.0, ``docs/source/tutorials/models/
DeepSeek-*.md`` section 5 and ``features/pd_disaggregation_mooncake_multi_node.md``; see
``docs/pd-disaggregation.md``):

- ``engines`` prefill and decode instances (xPyD), each a data-parallel group of ``data`` ranks
  of ``tensor`` NPUs on ``nodes`` hosts, ``data_local`` ranks per host, rank ``i`` of a host
  serving on ``port + i`` (``launch_online_dp.py``: ``--vllm-start-port``);
- per engine its ``kv_port`` and, optionally, its ``engine_id``;
- the ``kv_connector_extra_config`` every engine is given (``extra_config``: the prefill and
  decode dp/tp sizes), by default each side's own layout.

The engines are :class:`ascend_serve.serving.router.PdEngine`; every refusal is
:func:`ascend_serve.serving.router.check_pd`'s (ports against the transport's range and each
other, extra_config against the layouts, duplicate engine ids, a side without the other) plus
the PD router's (no workers, an unknown policy), run when the profile is loaded and again when
the engines get real hosts (:func:`engines` with ``hosts``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ascend_serve.serving.router import (
    POLICIES,
    PdEngine,
    PdNode,
    RouterPlanError,
    RouterSettings,
    Worker,
    check_pd,
    pd_router_argv,
    rank_workers,
)

# The connectors of vllm-ascend v0.23.0's PD tutorials (DeepSeek-V3.1/V3.2: MooncakeConnectorV1;
# V4-Flash/V4-Pro: MooncakeHybridConnector), both answered by the router's default exchange.
CONNECTORS = ("MooncakeConnectorV1", "MooncakeHybridConnector")
SIDES: tuple[Literal["prefill"], Literal["decode"]] = ("prefill", "decode")
# launch_online_dp.py's own defaults are 9000 and 12345; the tutorials pass 7100 and 12321.
DEFAULT_START_PORT = 7100
DEFAULT_RPC_PORT = 12321


class PdSide(BaseModel):
    """The prefill or the decode instances of a PD profile."""

    model_config = ConfigDict(extra="forbid")

    engines: int = Field(1, ge=0, le=64)
    nodes: int = Field(1, ge=1, le=64)
    tensor: int = Field(1, ge=1, le=64)
    data: int = Field(1, ge=1, le=1024)
    data_local: int | None = Field(None, ge=1)
    expert: bool = False
    kv_ports: list[int] = Field(default_factory=list)
    engine_ids: list[str] | None = None
    port: int = Field(DEFAULT_START_PORT, ge=1, le=65535)
    rpc_port: int = Field(DEFAULT_RPC_PORT, ge=1, le=65535)
    # vLLM flags of this side, merged over the profile's (null removes one), and environment
    # added to the profile's.
    vllm: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("kv_ports")
    @classmethod
    def _ports(cls, value: list[int]) -> list[int]:
        for port in value:
            if not 1 <= port <= 65535:
                raise ValueError(f"kv_port {port} is not a port (1-65535)")
        return value

    @model_validator(mode="after")
    def _layout(self) -> PdSide:
        if self.data % self.nodes:
            raise ValueError(f"data {self.data} is not a multiple of nodes {self.nodes}")
        if self.data_local is None:
            self.data_local = self.data // self.nodes
        if self.data_local * self.nodes != self.data:
            raise ValueError(f"data_local {self.data_local} x nodes {self.nodes} != data "
                             f"{self.data}")
        if len(self.kv_ports) != self.engines:
            raise ValueError(f"{self.engines} engine(s) but {len(self.kv_ports)} kv_ports: give "
                             "each engine its kv_port")
        if self.engine_ids is not None and len(self.engine_ids) != self.engines:
            raise ValueError(f"{self.engines} engine(s) but {len(self.engine_ids)} engine_ids: "
                             "give each engine its id, or none")
        return self

    @property
    def ranks_per_node(self) -> int:
        return self.data_local or self.data // self.nodes


class PdLayout(BaseModel):
    """A profile's ``pd`` section."""

    model_config = ConfigDict(extra="forbid")

    connector: Literal["MooncakeConnectorV1", "MooncakeHybridConnector"]
    # kv_connector_extra_config's {"prefill": {dp_size, tp_size}, "decode": {...}} as every
    # engine gets it; default: each side's own layout.
    extra_config: dict[str, dict[str, int]] | None = None
    router_policy: str = "cache_aware"
    prefill: PdSide
    decode: PdSide

    @property
    def hosts(self) -> int:
        """Hosts of the whole deployment (one engine's host is no other engine's)."""
        return sum(s.engines * s.nodes for s in (self.prefill, self.decode))

    def side(self, name: str) -> PdSide:
        if name == "prefill":
            return self.prefill
        if name == "decode":
            return self.decode
        raise ValueError(f"PD side {name!r} is neither prefill nor decode")

    def declared_extra_config(self) -> dict[str, dict[str, int]]:
        if self.extra_config is not None:
            return {k: dict(v) for k, v in self.extra_config.items()}
        return {name: {"dp_size": self.side(name).data, "tp_size": self.side(name).tensor}
                for name in SIDES}


def engine_name(side: str, index: int) -> str:
    return f"{side}-{index}"


def placeholder_host(side: str, engine: int, node: int) -> str:
    """The name of host ``node`` of an engine before the layout is placed on real hosts."""
    return f"{side}-{engine}-host-{node}"


def engines(layout: PdLayout, npus_per_host: int,
            hosts: Mapping[str, Sequence[Sequence[str]]] | None = None) -> list[PdEngine]:
    """The layout's engines, prefill first; ``hosts[side][engine][node]`` places them (default:
    one host of their own each, :func:`placeholder_host`)."""
    out: list[PdEngine] = []
    extra = layout.declared_extra_config()
    for side_name in SIDES:
        side = layout.side(side_name)
        placed = hosts.get(side_name) if hosts is not None else None
        if hosts is not None and (placed is None or len(placed) != side.engines):
            raise RouterPlanError(
                f"the {side_name} side has {side.engines} engine(s) but "
                f"{len(placed or [])} host list(s) were given: give one list per engine")
        for index in range(side.engines):
            names = (list(placed[index]) if placed is not None else
                     [placeholder_host(side_name, index, n) for n in range(side.nodes)])
            if len(names) != side.nodes:
                raise RouterPlanError(
                    f"{side_name} engine {engine_name(side_name, index)} runs on {side.nodes} "
                    f"host(s) but {len(names)} were given: give it {side.nodes}")
            per = side.ranks_per_node
            nodes = tuple(PdNode(host, npus_per_host, n * per, per, side.port)
                          for n, host in enumerate(names))
            out.append(PdEngine(
                engine_name(side_name, index), side_name, side.kv_ports[index], side.data,
                side.tensor, nodes, extra,
                engine_id=side.engine_ids[index] if side.engine_ids is not None else None,
                connector=layout.connector))
    return out


def workers(pd_engines: Sequence[PdEngine]) -> tuple[list[Worker], list[Worker]]:
    """(prefill, decode) router workers: one per rank, host x rank port."""
    return ([w for e in pd_engines if e.role == "prefill" for w in rank_workers(e)],
            [w for e in pd_engines if e.role == "decode" for w in rank_workers(e)])


def check(layout: PdLayout, npus_per_host: int,
          hosts: Mapping[str, Sequence[Sequence[str]]] | None = None) -> list[PdEngine]:
    """Every refusal of the layout (placed on ``hosts`` when given), all at once; the engines.

    Raises :class:`RouterPlanError`: :func:`check_pd`'s problems, then the PD router's (no
    workers, an unknown policy)."""
    if layout.router_policy not in POLICIES:
        raise RouterPlanError(f"router_policy {layout.router_policy!r} is not one of "
                              f"{', '.join(POLICIES)}: choose one of those")
    pd_engines = engines(layout, npus_per_host, hosts)
    check_pd(pd_engines)
    prefill, decode = workers(pd_engines)
    pd_router_argv("vllm-router", prefill, decode, RouterSettings(policy=layout.router_policy))
    return pd_engines
