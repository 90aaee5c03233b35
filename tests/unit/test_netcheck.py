"""Ping pairs and the fleet's ping matrix report (``ascend_serve.network.netcheck``)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from ascend_serve.network import netcheck, netplan

FILTERS = "ansible_collections.ascend_serve.fleet.plugins.filter.netplan"
A2_FLEET: dict[str, Any] = {
    "subnets": [{"cidr": "198.51.100.0/24", "gateway": "198.51.100.1"}],
    "hosts": [{"name": n, "chip": "910B"} for n in ("a", "b", "c")],
}
OLD_910_FLEET: dict[str, Any] = {
    "subnets": [f"10.0.{i}.0/24" for i in range(4)],
    "hosts": [{"name": n, "chip": 910} for n in ("x", "y")],
}


def test_rail_pairs_join_the_same_device_index_on_every_other_host() -> None:
    plan = netplan.plan(A2_FLEET)
    pairs = netcheck.pairs(plan, "a", "rail")
    assert len(pairs) == 8 * 2
    assert {(p.device, p.peer_device) for p in pairs} == {(d, d) for d in range(8)}
    first = pairs[:2]
    assert [(p.peer_host, p.address) for p in first] == [("b", "198.51.100.10"),
                                                         ("c", "198.51.100.18")]


def test_subnet_pairs_on_the_old_910_pair_devices_d_and_d_plus_4() -> None:
    plan = netplan.plan(OLD_910_FLEET)
    pairs = netcheck.pairs(plan, "x", "subnet")
    assert len(pairs) == 8 * 2
    assert sorted(p.peer_device for p in pairs if p.device == 0) == [0, 4]
    assert sorted(p.peer_device for p in pairs if p.device == 5) == [1, 5]
    assert all(p.peer_host == "y" for p in pairs)


def test_subnet_plane_on_a2_reaches_every_device_of_the_others() -> None:
    pairs = netcheck.pairs(netplan.plan(A2_FLEET), "b", "subnet")
    assert len(pairs) == 8 * 8 * 2


def test_peers_limit_the_other_end_and_a_single_host_has_no_pairs() -> None:
    plan = netplan.plan(A2_FLEET)
    assert {p.peer_host for p in netcheck.pairs(plan, "a", "rail", ["a", "c", "zz"])} == {"c"}
    assert netcheck.pairs(plan, "a", "rail", ["a"]) == []


@pytest.mark.parametrize(("host", "plane", "message"), [
    ("a", "mesh", "ping plane 'mesh' is not one of rail, subnet"),
    ("nobody", "rail", "host nobody is not in the device IP plan"),
])
def test_bad_plane_or_host_is_refused(host: str, plane: str, message: str) -> None:
    with pytest.raises(netplan.NetPlanError, match=message):
        netcheck.pairs(netplan.plan(A2_FLEET), host, plane)


def _results(plan: netplan.NetPlan, host: str, fail: set[tuple[int, str]]) -> list[dict[str, Any]]:
    out = []
    for p in netcheck.pairs(plan, host, "rail"):
        bad = (p.device, p.peer_host) in fail
        out.append({**p.model_dump(), "ok": not bad, "sent": 3, "received": 0 if bad else 3,
                    "loss": 100.0 if bad else 0.0, "rtt_ms": [] if bad else [0.1] * 3,
                    "error": "hccn_tool: ping failed, timeout" if bad else None})
    return out


def test_report_orders_entries_counts_failures_and_names_them() -> None:
    plan = netplan.plan(A2_FLEET)
    # results arrive in any order; c is not in the results (e.g. it failed earlier)
    results = {"b": list(reversed(_results(plan, "b", set()))),
               "a": _results(plan, "a", {(3, "b")})}
    matrix = netcheck.report(plan, results, "rail", 3)
    assert matrix["hosts"] == ["a", "b"]
    assert matrix["pairs"] == 32
    assert matrix["failures"] == 1
    assert [(e["host"], e["device"], e["peer_host"]) for e in matrix["entries"][:3]] == [
        ("a", 0, "b"), ("a", 0, "c"), ("a", 1, "b")]
    assert "rtt_ms" not in matrix["entries"][0]  # an unchanged network gives an unchanged report
    bad = [e for e in matrix["entries"] if not e["ok"]]
    assert netcheck.describe_failure(bad[0]) == (
        "host a device 3 (198.51.100.5) -> host b device 3 (198.51.100.13): 0/3 received "
        "(hccn_tool: ping failed, timeout)"
    )
    text = netcheck.render(matrix)
    assert "a dev3 198.51.100.5" in text
    assert "FAIL 0/3 hccn_tool: ping failed, timeout" in text
    assert text.rstrip().endswith("32 pairs, 1 failed")


def test_report_of_a_single_host_says_there_are_no_pairs() -> None:
    plan = netplan.plan({**A2_FLEET, "hosts": [{"name": "solo", "chip": "A2"}]})
    matrix = netcheck.report(plan, {"solo": []})
    assert matrix["pairs"] == 0
    assert "no peers" in netcheck.render(matrix)


def test_filters_wrap_the_same_functions() -> None:
    filters = importlib.import_module(FILTERS)
    plan = filters.device_ip_plan(A2_FLEET)
    pairs = filters.device_ping_pairs(plan, "c", "rail")
    assert pairs[0] == {"device": 0, "address": "198.51.100.2", "peer_host": "a", "peer_device": 0}
    results = {"c": [{**p, "ok": p["peer_host"] != "a", "sent": 1,
                      "received": int(p["peer_host"] != "a")} for p in pairs]}
    matrix = filters.device_ping_report(plan, results, "rail", 1)
    failures = filters.device_ping_failures(matrix)
    assert len(failures) == 8
    assert failures[0].startswith("host c device 0 (198.51.100.18) -> host a device 0")
    assert "8 failed" in filters.device_ping_text(matrix)
