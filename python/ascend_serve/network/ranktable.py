"""HCCL rank tables (``hccl.json``) and vllm-ascend's prefill/decode rank table.

Read and validated in every form the vendor documents (hicann/hccl
``docs/zh/user_guide/cluster_info_config/rank_table_config_{910,a2,a3}.md``) and the real
samples of ``tests/data/corpus/ranktable`` show; built from a device IP plan.

Version 1.0 (910, A2, and A3 "AI Server mode"; values are strings)::

    {"status": "completed", "version": "1.0", "server_count": "2",
     "server_list": [{"server_id": "<host ip>", "container_ip": "<host ip>",
                      "device": [{"device_id": "0", "device_ip": "...", "rank_id": "0"}, ...]}]}

``device_ip`` is optional on a single server (absent, or ``""`` as in the vendor's TensorFlow
example) and IPv4 or IPv6; ``device_port``, ``host_port``, ``host_ip``, ``host_nic_ip`` may be
present. Rank ids are 0..n-1, each once, and one server's ranks are not interleaved with
another's.

Version 1.2, SuperPoD mode (A3): each device adds ``super_device_id`` (the hardware's SDID,
``npu-smi info -t spod-info``), each server ``host_ip``, and a top-level ``super_pod_list`` names
the servers of every super pod (listed together in server_list)::

    "server_list": [{"server_id": "<host ip>", "host_ip": "<host ip>", "container_ip": "...",
                     "device": [{"device_id": "0", "device_ip": "...", "super_device_id": "...",
                                 "rank_id": "0"}, ...]}],
    "super_pod_list": [{"super_pod_id": "0", "server_list": [{"server_id": "<host ip>"}]}]

Version 1.2 without ``super_device_id`` and ``super_pod_list`` is "AI Server mode" (the A3 doc:
both optional); ``server_count`` is optional in 1.2.

vllm-ascend's prefill/decode table (``examples/disaggregated_prefill_v1/gen_ranktable.py``)::

    {"version": "1.2", "server_count": "1",
     "prefill_device_list": [{"server_id": "...", "device_id": "0", "device_ip": "...",
                              "cluster_id": "1"}, ...],
     "decode_device_list": [...], "status": "completed"}

(on A3 each device adds ``super_pod_id`` and ``super_device_id`` before ``cluster_id``).

Generated rank order: servers in the plan's (inventory) order, grouped by super pod, devices by
device id, rank ids 0..n-1.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from ipaddress import IPv4Address, ip_address
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ascend_serve.network.netplan import NetPlan, NetPlanError, input_problems
from ascend_serve.resources import data_path

SCHEMA_PATH = data_path("ranktable.schema.json")
PD_SCHEMA_PATH = SCHEMA_PATH.with_name("ranktable_pd.schema.json")
PD_LISTS = ("prefill_device_list", "decode_device_list")


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
    # A3 (910C) only: the devices' super device ids as the hardware reports them (the SDID line of
    # ``npu-smi info -t spod-info -i <card> -c <chip>``), device 0 first. Required for 910C:
    # they are never derived from device ids.
    super_device_ids: list[int] | None = None


@cache
def _validator(path: Path = SCHEMA_PATH) -> Any:
    # Imported here: the rest of the ascend-serve CLI works without jsonschema.
    import jsonschema  # type: ignore[import-untyped]

    schema = json.loads(path.read_text(encoding="utf-8"))
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


def _plan_and_specs(
    plan: NetPlan | Mapping[str, Any], servers: Mapping[str, Any]
) -> tuple[NetPlan, dict[str, ServerSpec], bool]:
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
    return net, specs, chips == {"910C"}


def _sdids(net: NetPlan, specs: dict[str, ServerSpec]) -> dict[str, list[int]]:
    """Every A3 host's super device ids, from the input; refused when any is missing."""
    problems: list[Problem] = []
    found: dict[str, list[int]] = {}
    for name, host in net.hosts.items():
        given = specs[name].super_device_ids
        path = f"servers.{name}.super_device_ids"
        if not given:
            problems.append(Problem(path=path, message=(
                f"host {name} is 910C (A3): a version 1.2 rank table needs the super_device_id "
                "of each of its devices as the hardware reports it (the SDID of `npu-smi info "
                "-t spod-info -i <card> -c <chip>`); none given, and they are not derived from "
                "device ids")))
        elif len(given) != len(host.devices):
            problems.append(Problem(path=path, message=(
                f"{len(given)} super device ids for {len(host.devices)} devices")))
        else:
            found[name] = list(given)
    if problems:
        raise RankTableError(problems)
    return found


def build(plan: NetPlan | Mapping[str, Any], servers: Mapping[str, Any]) -> dict[str, Any]:
    """The rank table of every host in the plan; ``servers`` maps host name to IP or ServerSpec.

    910B/910 hosts give version 1.0; 910C (A3) hosts version 1.2 in SuperPoD mode, which needs
    every host's ``super_device_ids`` (hardware SDIDs) and takes its ``super_pod_id``.
    """
    net, specs, a3 = _plan_and_specs(plan, servers)
    sdids = _sdids(net, specs) if a3 else {}
    pods: dict[str, list[str]] = {}
    for name in net.hosts:  # servers of one super pod stay together (the A3 doc's rule)
        pods.setdefault(specs[name].super_pod_id if a3 else "0", []).append(name)
    server_list: list[dict[str, Any]] = []
    rank = 0
    for name in (n for members in pods.values() for n in members):
        host, spec = net.hosts[name], specs[name]
        server_id = str(spec.server_ip)
        ids = sdids.get(name) or [0] * len(host.devices)
        devices = []
        for dev, sdid in sorted(zip(host.devices, ids, strict=True), key=lambda p: p[0].device):
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
            {"super_pod_id": pod_id,
             "server_list": [{"server_id": str(specs[n].server_ip)} for n in members]}
            for pod_id, members in pods.items()
        ]
    problems = validate(table)
    if problems:
        raise RankTableError(problems)
    return table


def build_pd(
    plan: NetPlan | Mapping[str, Any], servers: Mapping[str, Any], prefill: int, decode: int
) -> dict[str, Any]:
    """vllm-ascend's prefill/decode rank table, as its ``gen_ranktable.py`` writes it.

    Every device of the plan (hosts in order, devices by id) gets ``cluster_id`` 1, 2, ...; the
    first ``prefill`` devices are the prefill list, the next ``decode`` the decode list;
    ``server_count`` is the number of hosts (gen_ranktable.py's WORLD_SIZE, one process a node).
    """
    net, specs, a3 = _plan_and_specs(plan, servers)
    if a3:
        # gen_ranktable.py reads an A3 device's address with `hccn_tool -i N -vnic -g`, which a
        # device IP plan does not hold (and no -vnic sample exists to read it from).
        raise RankTableError([Problem(path="$", message=(
            "a prefill/decode table for 910C (A3) hosts is not generated: vllm-ascend takes an "
            "A3 device's device_ip from `hccn_tool -vnic -g` (the vNIC), not from the device IP "
            "plan"))])
    devices: list[dict[str, str]] = []
    for name, host in net.hosts.items():
        for dev in sorted(host.devices, key=lambda d: d.device):
            devices.append({"server_id": str(specs[name].server_ip),
                            "device_id": str(dev.device), "device_ip": dev.address,
                            "cluster_id": str(len(devices) + 1)})
    problems = []
    if prefill < 1 or decode < 1:
        problems.append(Problem(path="$", message=(
            f"prefill ({prefill}) and decode ({decode}) need at least one device each")))
    elif prefill + decode > len(devices):
        problems.append(Problem(path="$", message=(
            f"prefill {prefill} + decode {decode} devices is more than the plan's "
            f"{len(devices)}")))
    if problems:
        raise RankTableError(problems)
    table: dict[str, Any] = {
        "version": "1.2",
        "server_count": str(len(net.hosts)),
        "prefill_device_list": devices[:prefill],
        "decode_device_list": devices[prefill:prefill + decode],
        "status": "completed",
    }
    problems = validate(table)
    if problems:
        raise RankTableError(problems)
    return table


def is_pd(table: Any) -> bool:
    """Whether ``table`` is a prefill/decode table (it has either device list)."""
    return isinstance(table, dict) and any(key in table for key in PD_LISTS)


def validate(table: Any) -> list[Problem]:
    """Every problem of a rank table (either kind): the schema's, then the cross-field checks."""
    pd = is_pd(table)
    problems = [
        Problem(path=error.json_path, message=error.message)
        for error in sorted(_validator(PD_SCHEMA_PATH if pd else SCHEMA_PATH).iter_errors(table),
                            key=lambda e: list(map(str, e.path)))
    ]
    if pd:
        problems += _pd_checks(table)
    elif isinstance(table, dict) and isinstance(table.get("server_list"), list):
        problems += _cross_checks(table)
    return problems


def _address_problem(value: Any, path: str, ipv4_only: bool = False) -> list[Problem]:
    """A non-empty address field that is not an IP address (IPv4 only where the doc says so)."""
    if not isinstance(value, str) or value == "":
        return []
    try:
        address = ip_address(value)
    except ValueError:
        address = None
    if address is None or (ipv4_only and address.version != 4):
        kind = "an IPv4" if ipv4_only else "an IPv4 or IPv6"
        return [Problem(path=path, message=f"{value!r} is not {kind} address")]
    return []


def _port_problems(entry: dict[str, Any], path: str) -> list[Problem]:
    return [
        Problem(path=f"{path}.{key}", message=f"{key} {entry[key]} is outside 1..65535")
        for key in ("device_port", "backup_device_port", "host_port")
        if isinstance(entry.get(key), str) and entry[key].isdigit() and int(entry[key]) > 65535
    ]


def _mode(table: dict[str, Any], devices: list[tuple[str, dict[str, Any]]]) -> list[Problem]:
    """super_device_id and super_pod_list: both (1.2 SuperPoD mode) or neither (AI Server)."""
    version, pods = table.get("version"), table.get("super_pod_list")
    with_sdid = [path for path, d in devices if "super_device_id" in d]
    if version == "1.0":
        return [Problem(path=f"{path}.super_device_id", message=(
            "super_device_id belongs to version 1.2 (A3); this table says 1.0"))
            for path in with_sdid] + ([] if pods is None else [Problem(
                path="$.super_pod_list",
                message="super_pod_list belongs to version 1.2 (A3); this table says 1.0")])
    if version != "1.2":
        return []
    if pods is not None:
        return [Problem(path=path, message=(
            "a table with super_pod_list (SuperPoD mode) needs super_device_id on every device"))
            for path, d in devices if "super_device_id" not in d]
    if with_sdid:
        return [Problem(path="$", message=(
            "super_device_id is set but there is no super_pod_list: give both (SuperPoD mode) "
            "or neither (AI Server mode)"))]
    return []


def _cross_checks(table: dict[str, Any]) -> list[Problem]:
    version, servers = table.get("version"), table["server_list"]
    problems: list[Problem] = []
    count = table.get("server_count")
    if count is None and version == "1.0":
        problems.append(Problem(path="$", message="'server_count' is a required property"))
    if isinstance(count, str) and count.isdigit() and int(count) != len(servers):
        problems.append(Problem(path="$.server_count", message=(
            f"says {count} but server_list has {len(servers)} server(s)")))
    ranks: dict[str, str] = {}
    rank_servers: list[list[int]] = []  # each server's rank numbers
    device_ips: dict[str, str] = {}
    server_ids: dict[str, int] = {}  # server_id -> index in server_list
    devices_seen: list[tuple[str, dict[str, Any]]] = []
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
        problems += _address_problem(server.get("host_ip"), f"{path}.host_ip", ipv4_only=True)
        problems += _address_problem(server.get("container_ip"), f"{path}.container_ip")
        devices = server.get("device")
        if not isinstance(devices, list):
            continue
        device_ids: dict[str, str] = {}
        numbers: list[int] = []
        for j, device in enumerate(devices):
            if not isinstance(device, dict):
                continue
            dpath = f"{path}.device[{j}]"
            devices_seen.append((dpath, device))
            rank = device.get("rank_id")
            if isinstance(rank, str) and rank.isdigit():
                numbers.append(int(rank))
            for key, seen, scope in (("device_id", device_ids, " in this server"),
                                     ("device_ip", device_ips, ""), ("rank_id", ranks, "")):
                value = device.get(key)
                if not isinstance(value, str) or value == "":  # "": no device IP
                    continue
                if value in seen:
                    problems.append(Problem(path=f"{dpath}.{key}", message=(
                        f"{key} {value} is used twice{scope}: also at {seen[value]}")))
                seen.setdefault(value, f"{dpath}.{key}")
            for key in ("device_ip", "backup_device_ip"):
                problems += _address_problem(device.get(key), f"{dpath}.{key}")
            problems += _port_problems(device, dpath)
        rank_servers.append(numbers)
    problems += _device_ips_needed(table, devices_seen, len(servers))
    problems += _mode(table, devices_seen)
    problems += _rank_range(ranks, len(devices_seen))
    problems += _interleaved(rank_servers)
    problems += _super_pods(table, version, server_ids)
    return problems


def _device_ips_needed(
    table: dict[str, Any], devices: list[tuple[str, dict[str, Any]]], server_count: int
) -> list[Problem]:
    """device_ip may be left out on one server, or (1.2) inside one super pod; else it is needed.

    rank_table_config_a2.md / a3.md: device_ip must be set in multi-machine setups (several
    servers, or several super pods).
    """
    pods = table.get("super_pod_list")
    if table.get("version") == "1.2" and isinstance(pods, list):
        if len(pods) <= 1:
            return []
        why = "a table of several super pods"
    elif server_count <= 1:
        return []
    else:
        why = "a table of several servers"
    return [Problem(path=path, message=f"{why} needs device_ip on every device")
            for path, device in devices if not device.get("device_ip")]


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


def _interleaved(rank_servers: list[list[int]]) -> list[Problem]:
    """HCCL: the rank ids of different servers are not interleaved ({0,1,2,7} / {3,4,5,6})."""
    spans = [(min(n), max(n), i) for i, n in enumerate(rank_servers) if n]
    problems = []
    for lo, hi, i in spans:
        for lo2, _hi2, k in spans:
            if k != i and lo < lo2 < hi:
                problems.append(Problem(path=f"$.server_list[{i}]", message=(
                    f"rank ids {lo}..{hi} of this server enclose rank {lo2} of "
                    f"$.server_list[{k}]: ranks of different servers must not interleave")))
                break
    return problems


def _super_pods(table: dict[str, Any], version: Any, server_ids: dict[str, int]) -> list[Problem]:
    """super_pod_list places every server once, its servers listed together; SDIDs unique."""
    pods = table.get("super_pod_list")
    if version != "1.2" or not isinstance(pods, list):
        return []
    problems: list[Problem] = []
    placed: dict[str, str] = {}
    pod_ids: dict[str, int] = {}
    pod_of: dict[int, int] = {}  # server_list index -> super pod index
    for i, pod in enumerate(pods):
        members = pod.get("server_list") if isinstance(pod, dict) else None
        pod_id = pod.get("super_pod_id") if isinstance(pod, dict) else None
        if isinstance(pod_id, str):
            if pod_id in pod_ids:
                problems.append(Problem(path=f"$.super_pod_list[{i}].super_pod_id", message=(
                    f"super_pod_id {pod_id} is also used at $.super_pod_list[{pod_ids[pod_id]}]")))
            pod_ids.setdefault(pod_id, i)
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
                pod_of[server_ids[sid]] = i
            placed.setdefault(sid, path)
    problems += [
        Problem(path=f"$.server_list[{i}].server_id",
                message=f"server {sid} is in no super pod of super_pod_list")
        for sid, i in server_ids.items() if sid not in placed
    ]
    order = [pod_of[i] for i in sorted(pod_of)]
    done: set[int] = set()
    for n, pod in enumerate(order):
        if pod in done and order[n - 1] != pod:
            index = sorted(pod_of)[n]
            problems.append(Problem(path=f"$.server_list[{index}]", message=(
                f"the servers of super pod $.super_pod_list[{pod}] must be listed together in "
                "server_list (super pods not interleaved)")))
        done.add(pod)
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


def _pd_checks(table: dict[str, Any]) -> list[Problem]:
    """Prefill/decode table: unique cluster ids, device IPs and devices; A3 fields all or none."""
    problems: list[Problem] = []
    seen: dict[str, dict[str, str]] = {"cluster_id": {}, "device_ip": {}, "device": {}}
    servers: set[str] = set()
    a3: list[tuple[str, bool]] = []
    for key in PD_LISTS:
        entries = table.get(key)
        for j, device in enumerate(entries if isinstance(entries, list) else []):
            if not isinstance(device, dict):
                continue
            path = f"$.{key}[{j}]"
            if isinstance(device.get("server_id"), str):
                servers.add(device["server_id"])
            problems += _address_problem(device.get("device_ip"), f"{path}.device_ip")
            where = f"{device.get('server_id')} device {device.get('device_id')}"
            for field, value in (("cluster_id", device.get("cluster_id")),
                                 ("device_ip", device.get("device_ip")), ("device", where)):
                if not isinstance(value, str) or not value:
                    continue
                if value in seen[field]:
                    problems.append(Problem(
                        path=path if field == "device" else f"{path}.{field}",
                        message=f"{field} {value} is used twice: also at {seen[field][value]}"))
                seen[field].setdefault(value, path if field == "device" else f"{path}.{field}")
            has = ["super_pod_id" in device, "super_device_id" in device]
            if has[0] != has[1]:
                problems.append(Problem(path=path, message=(
                    "super_pod_id and super_device_id go together (A3)")))
            a3.append((path, all(has)))
    if a3 and any(flag for _, flag in a3) and not all(flag for _, flag in a3):
        problems += [Problem(path=path, message=(
            "super_pod_id/super_device_id are on some devices (A3) but not on this one"))
            for path, flag in a3 if not flag]
    count = table.get("server_count")
    if isinstance(count, str) and count.isdigit() and len(servers) > int(count):
        problems.append(Problem(path="$.server_count", message=(
            f"says {count} but the device lists name {len(servers)} servers")))
    return problems


# --- reading ------------------------------------------------------------------------------------


def _device_reading(device: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    d = device if isinstance(device, dict) else {}
    reading = {key: d.get(key) for key in keys}
    if "device_ip" in reading and reading["device_ip"] == "":
        reading["device_ip"] = None  # the vendor's example writes "" for "no device IP"
    return reading


def read(table: Any) -> dict[str, Any]:
    """What a rank table says, whatever its form (no validation; see :func:`validate`).

    Server tables: ``{kind: "hccl", version, server_count, servers: [{server_id, devices:
    [{device_id, device_ip, rank_id, super_device_id}]}], super_pods: [{super_pod_id,
    server_ids}] | None}``. Prefill/decode tables: ``{kind: "pd", version, server_count,
    prefill_devices, decode_devices}``, each device ``{server_id, device_id, device_ip,
    cluster_id, super_device_id, super_pod_id}``. An absent or empty device_ip reads None;
    server_count reads as an int (None when absent or not a number).
    """
    data = table if isinstance(table, dict) else {}
    count = data.get("server_count")
    reading: dict[str, Any] = {
        "version": data.get("version"),
        "server_count": int(count) if isinstance(count, str) and count.isdigit() else None,
    }
    if is_pd(data):
        keys = ("server_id", "device_id", "device_ip", "cluster_id", "super_device_id",
                "super_pod_id")
        return {"kind": "pd", **reading, **{
            f"{name.split('_')[0]}_devices": [_device_reading(d, keys) for d in _list(data, name)]
            for name in PD_LISTS}}
    pods = data.get("super_pod_list")
    return {"kind": "hccl", **reading, "servers": [
        {"server_id": s.get("server_id"), "devices": [
            _device_reading(d, ("device_id", "device_ip", "rank_id", "super_device_id"))
            for d in _list(s, "device")]}
        for s in _list(data, "server_list") if isinstance(s, dict)
    ], "super_pods": None if not isinstance(pods, list) else [
        {"super_pod_id": p.get("super_pod_id"),
         "server_ids": [m.get("server_id") for m in _list(p, "server_list")
                        if isinstance(m, dict)]}
        for p in pods if isinstance(p, dict)
    ]}


def _list(mapping: dict[str, Any], key: str) -> list[Any]:
    value = mapping.get(key)
    return value if isinstance(value, list) else []


def rank_count(table: Any) -> int:
    """How many devices (ranks) a table lists, however malformed it is."""
    reading = read(table)
    if reading["kind"] == "pd":
        return len(reading["prefill_devices"]) + len(reading["decode_devices"])
    return sum(len(s["devices"]) for s in reading["servers"])
