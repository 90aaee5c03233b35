"""Cross-node reachability of NPU device NICs: who pings whom, and the fleet's matrix report.

Each device pings the peer devices of its *plane* on the other hosts with ``hccn_tool -i D -ping
-g address X``. Two planes are known:

* ``rail`` (default): device ``d`` of a host pings device ``d`` of every other host, the pairs
  HCCL connects across servers in the usual rail-per-device-index network;
* ``subnet``: every device pings every device of the other hosts in its own subnet (all of them
  on A2/A3, the paired devices ``d``/``d+4`` on the old 910); use it where the leaf switches are
  not rail-aligned.

The report lists every pair once, in plan (inventory) order, with packets sent and received and
the reason of a failure; it carries no round-trip times, so an unchanged network gives an
unchanged report file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from ipaddress import IPv4Network
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from ascend_serve.network.netplan import HostPlan, NetPlan, NetPlanError, input_problems

Plane = Literal["rail", "subnet"]
PLANES: tuple[str, ...] = ("rail", "subnet")


class PingPair(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    device: int
    address: str  # the peer device's address
    peer_host: str
    peer_device: int


def _as_plan(plan: NetPlan | Mapping[str, Any]) -> NetPlan:
    try:
        return plan if isinstance(plan, NetPlan) else NetPlan.model_validate(plan)
    except ValidationError as exc:
        raise NetPlanError(input_problems(exc)) from exc


def _subnet(netmask: str, address: str) -> IPv4Network:
    return IPv4Network(f"{address}/{netmask}", strict=False)


def pairs(
    plan: NetPlan | Mapping[str, Any],
    host: str,
    plane: str = "rail",
    peers: Iterable[str] | None = None,
) -> list[PingPair]:
    """The pings ``host`` sends: its devices to their peers on the other hosts of ``peers``.

    ``peers`` limits the other end to these hosts (default: every host in the plan); hosts that
    are not in the plan are ignored.
    """
    net = _as_plan(plan)
    if plane not in PLANES:
        raise NetPlanError([f"ping plane {plane!r} is not one of {', '.join(PLANES)}"])
    if host not in net.hosts:
        raise NetPlanError([f"host {host} is not in the device IP plan"])
    wanted = set(net.hosts) if peers is None else set(peers)
    others: list[HostPlan] = [
        h for name, h in net.hosts.items() if name != host and name in wanted
    ]
    result: list[PingPair] = []
    for dev in net.hosts[host].devices:
        for other in others:
            for peer in other.devices:
                if plane == "rail":
                    same = peer.device == dev.device
                else:
                    same = _subnet(peer.netmask, peer.address) == _subnet(dev.netmask, dev.address)
                if same:
                    result.append(PingPair(device=dev.device, address=peer.address,
                                           peer_host=other.name, peer_device=peer.device))
    return result


class PingResult(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    device: int
    address: str
    peer_host: str | None = None
    peer_device: int | None = None
    ok: bool
    sent: int | None = None
    received: int | None = None
    error: str | None = None


def report(
    plan: NetPlan | Mapping[str, Any],
    results: Mapping[str, Iterable[Mapping[str, Any]]],
    plane: str = "rail",
    count: int = 3,
) -> dict[str, Any]:
    """Fleet matrix from each host's ping results (``{host: [result, ...]}``).

    Returns ``{plane, count, hosts, pairs, failures, entries: [...]}``; an entry names the
    source host, device and address, the peer host, device and address, and the outcome.
    """
    net = _as_plan(plan)
    entries: list[dict[str, Any]] = []
    for host in net.hosts:
        if host not in results:
            continue
        own = {d.device: d.address for d in net.hosts[host].devices}
        parsed = sorted(
            (PingResult.model_validate(dict(r)) for r in results[host]),
            key=lambda r: (r.device, list(net.hosts).index(r.peer_host)
                           if r.peer_host in net.hosts else len(net.hosts), r.peer_device or 0),
        )
        for r in parsed:
            entries.append({
                "host": host,
                "device": r.device,
                "address": own.get(r.device),
                "peer_host": r.peer_host,
                "peer_device": r.peer_device,
                "peer_address": r.address,
                "ok": r.ok,
                "sent": r.sent,
                "received": r.received,
                "error": None if r.ok else (r.error or "no reply"),
            })
    failures = [e for e in entries if not e["ok"]]
    return {
        "plane": plane,
        "count": count,
        "hosts": [h for h in net.hosts if h in results],
        "pairs": len(entries),
        "failures": len(failures),
        "entries": entries,
    }


def _outcome(entry: Mapping[str, Any]) -> str:
    sent, received = entry.get("sent"), entry.get("received")
    counts = f"{received}/{sent}" if sent is not None and received is not None else "-"
    if entry["ok"]:
        return counts
    return f"FAIL {counts} {entry.get('error') or ''}".rstrip()


def describe_failure(entry: Mapping[str, Any]) -> str:
    """``host A device 3 (ip) -> host B device 3 (ip): 0/3 received (reason)``."""
    peer = (
        f"host {entry['peer_host']} device {entry['peer_device']}"
        if entry.get("peer_host") is not None else "peer"
    )
    sent, received = entry.get("sent"), entry.get("received")
    counts = (
        f"{received}/{sent} received" if sent is not None and received is not None
        else "no reply"
    )
    reason = f" ({entry['error']})" if entry.get("error") else ""
    return (
        f"host {entry['host']} device {entry['device']} ({entry.get('address')}) -> "
        f"{peer} ({entry['peer_address']}): {counts}{reason}"
    )


def render(matrix: Mapping[str, Any]) -> str:
    """The report as a table, one pair per line, failures marked; ends with a summary line."""
    rows = [("source", "peer", "received")]
    for e in matrix["entries"]:
        rows.append((
            f"{e['host']} dev{e['device']} {e.get('address') or '?'}",
            f"{e.get('peer_host') or '?'} dev{e.get('peer_device')} {e['peer_address']}",
            _outcome(e),
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(2)]
    lines = [
        f"NPU device ping matrix: plane {matrix['plane']}, {matrix['count']} packets per pair, "
        f"hosts {', '.join(matrix['hosts']) or '-'}"
    ]
    lines += [f"{r[0]:<{widths[0]}}  ->  {r[1]:<{widths[1]}}  {r[2]}" for r in rows]
    if not matrix["entries"]:
        lines.append("(no peers: a single host has no cross-node pairs)")
    lines.append(f"{matrix['pairs']} pairs, {matrix['failures']} failed")
    return "\n".join(lines) + "\n"
