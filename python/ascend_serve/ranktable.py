"""HCCL rank tables (``hccl.json``): built from a device IP plan, or read and validated.

Version 1.0 (A2 and old 910), every value a string::

    {"status": "completed", "version": "1.0", "server_count": "2",
     "server_list": [{"server_id": "<host ip>", "container_ip": "<host ip>",
                      "device": [{"device_id": "0", "device_ip": "...", "rank_id": "0"}, ...]}]}

Version 1.2 (A3, the layout of Huawei's CANN and MindCluster docs): each device adds
``super_device_id``, each server adds ``host_ip``, and a top-level ``super_pod_list`` names the
servers of every super pod::

    "server_list": [{"server_id": "<host ip>", "host_ip": "<host ip>", "container_ip": "...",
                     "device": [{"device_id": "0", "device_ip": "...", "super_device_id": "0",
                                 "rank_id": "0"}, ...]}],
    "super_pod_list": [{"super_pod_id": "0", "server_list": [{"server_id": "<host ip>"}]}]

Rank order: servers in the plan's (inventory) order, devices by device id, rank ids 0..n-1.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from .netplan import DEVICES, NetPlan, NetPlanError, input_problems

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "templates" / "ranktable.schema.json"


class Problem(BaseModel):
    path: str  # JSON path, e.g. $.server_list[1].device[3].device_ip
    message: str


class RankTableError(ValueError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__(
            "rank table: " + "; ".join(f"{p.path}: {p.message}" for p in problems)
        )


class ServerSpec(BaseModel):
    """What the plan does not know about a server: its host IP and, on A3, its super pod."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    server_ip: IPv4Address
    container_ip: IPv4Address | None = None  # default: server_ip (no container network)
    super_pod_id: str = "0"
    # Hardware SDIDs (npu-smi info -t spod-info); default: position in the super pod x 16 + device.
    super_device_ids: list[int] | None = None


@cache
def _validator() -> Any:
    # Imported here: the rest of the ascend-serve CLI works without jsonschema.
    import jsonschema  # type: ignore[import-untyped]

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    cls = jsonschema.Draft202012Validator
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _servers(plan: NetPlan, servers: Mapping[str, Any]) -> dict[str, ServerSpec]:
    problems = [
        Problem(path=f"servers.{name}", message=f"host {name} is not in the device IP plan")
        for name in servers if name not in plan.hosts
    ]
    specs: dict[str, ServerSpec] = {}
    for name in plan.hosts:
        if name not in servers:
            problems.append(Problem(path=f"servers.{name}", message=f"no server IP for {name}"))
            continue
        raw = servers[name]
        try:
            specs[name] = raw if isinstance(raw, ServerSpec) else ServerSpec.model_validate(
                {"server_ip": raw} if isinstance(raw, str) else raw
            )
        except ValidationError as exc:
            problems += [Problem(path=f"servers.{name}", message=m) for m in input_problems(exc)]
    if problems:
        raise RankTableError(problems)
    return specs


def build(plan: NetPlan | Mapping[str, Any], servers: Mapping[str, Any]) -> dict[str, Any]:
    """The rank table of every host in the plan; ``servers`` maps host name to IP or ServerSpec."""
    try:
        net = plan if isinstance(plan, NetPlan) else NetPlan.model_validate(plan)
    except ValidationError as exc:
        raise NetPlanError(input_problems(exc)) from exc
    specs = _servers(net, servers)
    chips = {h.chip for h in net.hosts.values()}
    if "910C" in chips and len(chips) > 1:
        raise RankTableError([Problem(path="$", message=(
            "one rank table cannot mix 910C (version 1.2) with "
            f"{', '.join(sorted(chips - {'910C'}))} hosts (version 1.0)"))])
    a3 = chips == {"910C"}
    pods: dict[str, list[str]] = {}
    server_list: list[dict[str, Any]] = []
    rank = 0
    for name, host in net.hosts.items():
        spec = specs[name]
        server_id = str(spec.server_ip)
        pod = pods.setdefault(spec.super_pod_id, [])
        sdids = spec.super_device_ids or [
            len(pod) * DEVICES["910C"] + d.device for d in host.devices
        ]
        if len(sdids) != len(host.devices):
            raise RankTableError([Problem(path=f"servers.{name}.super_device_ids", message=(
                f"{len(sdids)} super device ids for {len(host.devices)} devices"))])
        pod.append(server_id)
        devices = []
        for dev, sdid in sorted(zip(host.devices, sdids, strict=True), key=lambda p: p[0].device):
            entry = {"device_id": str(dev.device), "device_ip": dev.address}
            if a3:
                entry["super_device_id"] = str(sdid)
            entry["rank_id"] = str(rank)
            rank += 1
            devices.append(entry)
        server: dict[str, Any] = {"server_id": server_id}
        if a3:
            server["host_ip"] = server_id
        server["container_ip"] = str(spec.container_ip or spec.server_ip)
        server["device"] = devices
        server_list.append(server)
    table: dict[str, Any] = {
        "status": "completed",
        "version": "1.2" if a3 else "1.0",
        "server_count": str(len(server_list)),
        "server_list": server_list,
    }
    if a3:
        table["super_pod_list"] = [
            {"super_pod_id": pod_id, "server_list": [{"server_id": s} for s in members]}
            for pod_id, members in pods.items()
        ]
    problems = validate(table)
    if problems:
        raise RankTableError(problems)
    return table


def validate(table: Any) -> list[Problem]:
    """Every problem of a rank table: the schema's, then the cross-field checks."""
    problems = [
        Problem(path=error.json_path, message=error.message)
        for error in sorted(_validator().iter_errors(table), key=lambda e: list(map(str, e.path)))
    ]
    if isinstance(table, dict) and isinstance(table.get("server_list"), list):
        problems += _cross_checks(table)
    return problems


def _cross_checks(table: dict[str, Any]) -> list[Problem]:
    version, servers = table.get("version"), table["server_list"]
    problems: list[Problem] = []
    count = table.get("server_count")
    if isinstance(count, str) and count.isdigit() and int(count) != len(servers):
        problems.append(Problem(path="$.server_count", message=(
            f"says {count} but server_list has {len(servers)} server(s)")))
    ranks: dict[str, str] = {}
    device_count = 0
    device_ips: dict[str, str] = {}
    server_ids: dict[str, int] = {}  # server_id -> index in server_list
    for i, server in enumerate(servers):
        if not isinstance(server, dict):
            continue
        path = f"$.server_list[{i}]"
        sid = server.get("server_id")
        if isinstance(sid, str):
            if sid in server_ids:
                problems.append(Problem(path=f"{path}.server_id", message=(
                    f"server_id {sid} is also used at $.server_list[{server_ids[sid]}]")))
            server_ids.setdefault(sid, i)
        devices = server.get("device")
        if not isinstance(devices, list):
            continue
        device_ids: dict[str, str] = {}
        for j, device in enumerate(devices):
            if not isinstance(device, dict):
                continue
            dpath = f"{path}.device[{j}]"
            device_count += 1
            for key, seen, scope in (("device_id", device_ids, " in this server"),
                                     ("device_ip", device_ips, ""), ("rank_id", ranks, "")):
                value = device.get(key)
                if not isinstance(value, str):
                    continue
                if value in seen:
                    problems.append(Problem(path=f"{dpath}.{key}", message=(
                        f"{key} {value} is used twice{scope}: also at {seen[value]}")))
                seen.setdefault(value, f"{dpath}.{key}")
            has_sdid = "super_device_id" in device
            if version == "1.0" and has_sdid:
                problems.append(Problem(path=f"{dpath}.super_device_id", message=(
                    "super_device_id belongs to version 1.2 (A3); this table says 1.0")))
            elif version == "1.2" and not has_sdid:
                problems.append(Problem(path=dpath, message=(
                    "version 1.2 needs super_device_id on every device")))
    problems += _rank_range(ranks, device_count)
    problems += _super_pods(table, version, server_ids)
    return problems


def _rank_range(ranks: dict[str, str], device_count: int) -> list[Problem]:
    """Rank ids are 0..n-1 for n devices; ``ranks`` maps each rank id seen to its first path."""
    numbers = {int(r): path for r, path in ranks.items() if r.isdigit()}
    expected = set(range(device_count))
    problems = [
        Problem(path=path, message=(
            f"rank_id {r} is outside 0..{device_count - 1} (one rank per device, consecutive)"))
        for r, path in sorted(numbers.items()) if r not in expected
    ]
    missing = sorted(expected - set(numbers))
    if missing:
        problems.append(Problem(path="$.server_list", message=(
            f"rank ids must be 0..{device_count - 1} with none skipped; missing "
            + ", ".join(map(str, missing)))))
    return problems


def _super_pods(table: dict[str, Any], version: Any, server_ids: dict[str, int]) -> list[Problem]:
    """super_pod_list only in 1.2, places every server once; SDIDs are unique in a super pod."""
    pods = table.get("super_pod_list")
    if version == "1.0":
        return [] if pods is None else [Problem(path="$.super_pod_list", message=(
            "super_pod_list belongs to version 1.2 (A3); this table says 1.0"))]
    if version != "1.2":
        return []
    if pods is None:
        return [Problem(path="$", message="version 1.2 needs a super_pod_list")]
    if not isinstance(pods, list):
        return []
    problems: list[Problem] = []
    placed: dict[str, str] = {}
    for i, pod in enumerate(pods):
        members = pod.get("server_list") if isinstance(pod, dict) else None
        sdids: dict[str, str] = {}
        for j, member in enumerate(members if isinstance(members, list) else []):
            sid = member.get("server_id") if isinstance(member, dict) else None
            if not isinstance(sid, str):
                continue
            path = f"$.super_pod_list[{i}].server_list[{j}].server_id"
            if sid not in server_ids:
                problems.append(Problem(path=path, message=f"server {sid} is not in server_list"))
            elif sid in placed:
                problems.append(Problem(path=path, message=(
                    f"server {sid} is also placed at {placed[sid]}")))
            else:
                problems += _duplicate_sdids(table, server_ids[sid], sdids)
            placed.setdefault(sid, path)
    problems += [
        Problem(path=f"$.server_list[{i}].server_id",
                message=f"server {sid} is in no super pod of super_pod_list")
        for sid, i in server_ids.items() if sid not in placed
    ]
    return problems


def _duplicate_sdids(table: dict[str, Any], index: int, sdids: dict[str, str]) -> list[Problem]:
    """super_device_ids of server ``index`` already in ``sdids`` (its super pod's so far)."""
    devices = table["server_list"][index].get("device")
    problems = []
    for j, device in enumerate(devices if isinstance(devices, list) else []):
        sdid = device.get("super_device_id") if isinstance(device, dict) else None
        if not isinstance(sdid, str):
            continue
        path = f"$.server_list[{index}].device[{j}].super_device_id"
        if sdid in sdids:
            problems.append(Problem(path=path, message=(
                f"super_device_id {sdid} is used twice in one super pod: also at {sdids[sdid]}")))
        sdids.setdefault(sdid, path)
    return problems
