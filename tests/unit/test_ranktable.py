"""Rank tables: generation from a plan (1.0, 1.2, prefill/decode), validation, filter and CLI."""

from __future__ import annotations

import copy
import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml
from typer.testing import CliRunner

from ascend_serve.cli.main import app
from ascend_serve.network.netplan import NetPlan, plan
from ascend_serve.network.ranktable import (
    PD_SCHEMA_PATH,
    SCHEMA_PATH,
    RankTableError,
    build,
    build_pd,
    read,
    validate,
)

FILTERS = "ansible_collections.ascend_serve.fleet.plugins.filter.netplan"
A2_FLEET: dict[str, Any] = {
    "subnets": ["192.168.100.0/24"],
    "hosts": [{"name": "node-b", "chip": "910B"}, {"name": "node-a", "chip": "910B"}],
}
A2_SERVERS: dict[str, Any] = {
    "node-a": "10.0.0.11",
    "node-b": {"server_ip": "10.0.0.12", "container_ip": "172.17.0.2"},
}


def _device(device: int, ip: str, rank: int) -> dict[str, str]:
    return {"device_id": str(device), "device_ip": ip, "rank_id": str(rank)}


def _a2_table() -> dict[str, Any]:
    return build(plan(A2_FLEET), A2_SERVERS)


A3_FLEET: dict[str, Any] = {
    "subnets": ["10.20.0.0/24", "10.21.0.0/24"],
    "hosts": [{"name": "a3-0", "chip": "910C"}, {"name": "a3-1", "chip": "910C"}]}


def _a3_server(ip: str, first_sdid: int, **more: Any) -> dict[str, Any]:
    # SDIDs are the hardware's (npu-smi info -t spod-info), given as input, never computed.
    return {"server_ip": ip, "super_device_ids": list(range(first_sdid, first_sdid + 16)),
            **more}


def _a3_table(**servers: Any) -> dict[str, Any]:
    return build(plan(A3_FLEET), {"a3-0": _a3_server("10.0.1.1", 0),
                                  "a3-1": _a3_server("10.0.1.2", 16), **servers})


def test_two_a2_hosts_exact_table_in_inventory_order() -> None:
    table = _a2_table()
    assert table == {
        "status": "completed",
        "version": "1.0",
        "server_count": "2",
        "server_list": [
            {"server_id": "10.0.0.12", "container_ip": "172.17.0.2", "device": [
                _device(0, "192.168.100.1", 0), _device(1, "192.168.100.2", 1),
                _device(2, "192.168.100.3", 2), _device(3, "192.168.100.4", 3),
                _device(4, "192.168.100.5", 4), _device(5, "192.168.100.6", 5),
                _device(6, "192.168.100.7", 6), _device(7, "192.168.100.8", 7)]},
            {"server_id": "10.0.0.11", "container_ip": "10.0.0.11", "device": [
                _device(0, "192.168.100.9", 8), _device(1, "192.168.100.10", 9),
                _device(2, "192.168.100.11", 10), _device(3, "192.168.100.12", 11),
                _device(4, "192.168.100.13", 12), _device(5, "192.168.100.14", 13),
                _device(6, "192.168.100.15", 14), _device(7, "192.168.100.16", 15)]},
        ],
    }
    # Key order as the vendor writes it (the file is byte-identical on every node).
    assert list(table) == ["status", "version", "server_count", "server_list"]
    assert list(table["server_list"][0]["device"][0]) == ["device_id", "device_ip", "rank_id"]
    assert validate(table) == []


def test_a3_table_is_version_1_2_with_super_devices_and_super_pods() -> None:
    table = _a3_table()
    assert table["version"] == "1.2"
    second = table["server_list"][1]
    assert list(second) == ["server_id", "host_ip", "container_ip", "device"]
    assert second["host_ip"] == "10.0.1.2"
    # Device 3 is die 1 of NPU 1: the second plane (dual_plane, the A3 default).
    assert second["device"][3] == {"device_id": "3", "device_ip": "10.21.0.10",
                                   "super_device_id": "19", "rank_id": "19"}
    assert len(second["device"]) == 16
    assert table["super_pod_list"] == [
        {"super_pod_id": "0", "server_list": [{"server_id": "10.0.1.1"},
                                              {"server_id": "10.0.1.2"}]},
    ]
    assert validate(table) == []


def test_a3_super_pods_and_hardware_super_device_ids() -> None:
    sdids = list(range(38600700, 38600716))
    table = _a3_table(**{"a3-1": {"server_ip": "10.0.1.2", "super_pod_id": "1",
                                  "super_device_ids": sdids}})
    assert validate(table) == []
    assert table["server_list"][0]["device"][15]["super_device_id"] == "15"
    assert table["server_list"][1]["device"][0]["super_device_id"] == "38600700"
    assert [p["super_pod_id"] for p in table["super_pod_list"]] == ["0", "1"]
    assert table["super_pod_list"][1]["server_list"] == [{"server_id": "10.0.1.2"}]


@pytest.mark.parametrize(
    ("servers", "path", "message"),
    [
        ({"node-a": "10.0.0.11"}, "servers.node-b", "no server IP for node-b"),
        ({**A2_SERVERS, "node-z": "10.0.0.99"}, "servers.node-z",
         "host node-z is not in the device IP plan"),
        ({**A2_SERVERS, "node-a": "10.0.0.12"}, "$.server_list[1].server_id",
         "server_id 10.0.0.12 is also used at $.server_list[0]"),
        ({**A2_SERVERS, "node-a": "not-an-ip"}, "servers.node-a",
         "server_ip: Input is not a valid IPv4 address"),
    ],
    ids=["missing", "unknown", "same-ip", "bad-ip"],
)
def test_generation_problems(servers: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(RankTableError) as caught:
        build(plan(A2_FLEET), servers)
    assert (path, message) in [(p.path, p.message) for p in caught.value.problems]


def test_a3_table_needs_hardware_super_device_ids() -> None:
    with pytest.raises(RankTableError) as caught:
        build(plan(A3_FLEET), {"a3-0": _a3_server("10.0.1.1", 0), "a3-1": "10.0.1.2"})
    [problem] = caught.value.problems
    assert problem.path == "servers.a3-1.super_device_ids"
    assert problem.message.startswith(
        "host a3-1 is 910C (A3): a version 1.2 rank table needs the super_device_id of each of "
        "its devices as the hardware reports it (the SDID of `npu-smi info -t spod-info")
    with pytest.raises(RankTableError, match="3 super device ids for 16 devices"):
        build(plan(A3_FLEET), {"a3-0": _a3_server("10.0.1.1", 0),
                               "a3-1": {"server_ip": "10.0.1.2", "super_device_ids": [1, 2, 3]}})


def _two_pod_table() -> dict[str, Any]:
    """Three A3 servers in inventory order a3-0 (pod 7), a3-1 (pod 8), a3-2 (pod 7)."""
    fleet = {"subnets": ["10.20.0.0/24", "10.21.0.0/24"], "hosts": [
        {"name": f"a3-{n}", "chip": "910C"} for n in range(3)]}
    return build(plan(fleet), {
        "a3-0": _a3_server("10.0.1.1", 0, super_pod_id="7"),
        "a3-1": _a3_server("10.0.1.2", 0, super_pod_id="8"),
        "a3-2": _a3_server("10.0.1.3", 16, super_pod_id="7")})


def test_servers_of_a_super_pod_stay_together() -> None:
    table = _two_pod_table()
    assert [s["server_id"] for s in table["server_list"]] == ["10.0.1.1", "10.0.1.3", "10.0.1.2"]
    assert table["server_list"][1]["device"][0]["rank_id"] == "16"
    assert [p["super_pod_id"] for p in table["super_pod_list"]] == ["7", "8"]


def test_a3_dual_plane_plan_gives_two_subnets_per_server() -> None:
    fleet = {**A3_FLEET, "layout": "dual_plane", "subnets": ["10.20.0.0/24", "10.21.0.0/24"]}
    table = build(plan(fleet), {"a3-0": _a3_server("10.0.1.1", 0),
                                "a3-1": _a3_server("10.0.1.2", 16)})
    ips = [d["device_ip"] for d in table["server_list"][1]["device"]]
    assert ips[:4] == ["10.20.0.9", "10.21.0.9", "10.20.0.10", "10.21.0.10"]
    assert validate(table) == []


def test_one_table_does_not_mix_a2_and_a3() -> None:
    mixed = plan({"subnets": ["10.0.0.0/24"], "hosts": [
        {"name": "a2", "chip": "910B"},
        {"name": "a3", "chip": "910C", "index": 1,
         "addresses": [f"10.0.0.{n}" for n in range(100, 116)]}]})
    with pytest.raises(RankTableError, match=r"cannot mix 910C \(version 1\.2\) with 910B"):
        build(mixed, {"a2": "10.0.0.1", "a3": "10.0.0.2"})


@pytest.mark.parametrize("path", [SCHEMA_PATH, PD_SCHEMA_PATH], ids=["hccl", "pd"])
def test_schema_file_is_a_valid_2020_12_schema(path: Path) -> None:
    jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text()))


Mutation = Callable[[dict[str, Any]], Any]


def _set(path: str, value: Any) -> Mutation:
    """Set a dotted path (server_list.1.device.0.rank_id) of a table."""
    *parents, last = path.split(".")

    def mutate(table: dict[str, Any]) -> None:
        node: Any = table
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value
    return mutate


def _drop(key: str) -> Mutation:
    return lambda t: t["server_list"][0]["device"][0].pop(key)


A2_CASES: list[tuple[str, Mutation, str, str]] = [
    ("server-count", _set("server_count", "3"), "$.server_count",
     "says 3 but server_list has 2 server(s)"),
    ("not-a-string", _set("server_list.0.device.0.rank_id", 0),
     "$.server_list[0].device[0].rank_id", "0 is not of type 'string'"),
    ("count-not-a-string", _set("server_count", 2), "$.server_count",
     "2 is not of type 'string'"),
    ("missing-field", _drop("rank_id"), "$.server_list[0].device[0]",
     "'rank_id' is a required property"),
    ("no-device-ip-on-two-servers", _drop("device_ip"), "$.server_list[0].device[0]",
     "a table of several servers needs device_ip on every device"),
    ("empty-device-ip-on-two-servers", _set("server_list.1.device.2.device_ip", ""),
     "$.server_list[1].device[2]", "a table of several servers needs device_ip on every device"),
    ("bad-ip", _set("server_list.0.device.1.device_ip", "192.168.100.300"),
     "$.server_list[0].device[1].device_ip",
     "'192.168.100.300' is not an IPv4 or IPv6 address"),
    ("bad-container-ip", _set("server_list.0.container_ip", "node-a"),
     "$.server_list[0].container_ip", "'node-a' is not an IPv4 or IPv6 address"),
    ("port-range", _set("server_list.0.device.0.device_port", "70000"),
     "$.server_list[0].device[0].device_port", "device_port 70000 is outside 1..65535"),
    ("port-zero", _set("server_list.0.device.0.device_port", "0"),
     "$.server_list[0].device[0].device_port", "'0' does not match '^[1-9][0-9]{0,4}$'"),
    ("no-server-count-in-1.0", lambda t: t.pop("server_count"), "$",
     "'server_count' is a required property"),
    ("interleaved-ranks", lambda t: (_set("server_list.0.device.7.rank_id", "15")(t),
                                     _set("server_list.1.device.7.rank_id", "7")(t)),
     "$.server_list[0]", "rank ids 0..15 of this server enclose rank 7 of $.server_list[1]: "
     "ranks of different servers must not interleave"),
    ("status", _set("status", "initializing"), "$.status", "'completed' was expected"),
    ("version", _set("version", "2.0"), "$.version", "'2.0' is not one of ['1.0', '1.2']"),
    ("duplicate-rank", _set("server_list.1.device.0.rank_id", "0"),
     "$.server_list[1].device[0].rank_id",
     "rank_id 0 is used twice: also at $.server_list[0].device[0].rank_id"),
    ("skipped-rank", _set("server_list.1.device.7.rank_id", "16"), "$.server_list",
     "rank ids must be 0..15 with none skipped; missing 15"),
    ("rank-out-of-range", _set("server_list.1.device.7.rank_id", "16"),
     "$.server_list[1].device[7].rank_id",
     "rank_id 16 is outside 0..15 (one rank per device, consecutive)"),
    ("duplicate-device-id", _set("server_list.0.device.1.device_id", "0"),
     "$.server_list[0].device[1].device_id",
     "device_id 0 is used twice in this server: also at $.server_list[0].device[0].device_id"),
    ("duplicate-device-ip", _set("server_list.1.device.0.device_ip", "192.168.100.1"),
     "$.server_list[1].device[0].device_ip",
     "device_ip 192.168.100.1 is used twice: also at $.server_list[0].device[0].device_ip"),
    ("duplicate-server", _set("server_list.1.server_id", "10.0.0.12"),
     "$.server_list[1].server_id", "server_id 10.0.0.12 is also used at $.server_list[0]"),
    ("super-device-in-1.0", _set("server_list.0.device.0.super_device_id", "0"),
     "$.server_list[0].device[0].super_device_id",
     "super_device_id belongs to version 1.2 (A3); this table says 1.0"),
    ("super-pods-in-1.0", _set("super_pod_list", [{"super_pod_id": "0", "server_list": [
        {"server_id": "10.0.0.12"}]}]), "$.super_pod_list",
     "super_pod_list belongs to version 1.2 (A3); this table says 1.0"),
]

A3_CASES: list[tuple[str, Mutation, str, str]] = [
    ("no-super-device", _drop("super_device_id"), "$.server_list[0].device[0]",
     "a table with super_pod_list (SuperPoD mode) needs super_device_id on every device"),
    ("no-super-pods", lambda t: t.pop("super_pod_list"), "$",
     "super_device_id is set but there is no super_pod_list: give both (SuperPoD mode) or "
     "neither (AI Server mode)"),
    ("host-ip-ipv6", _set("server_list.0.host_ip", "2001:db8::1"), "$.server_list[0].host_ip",
     "'2001:db8::1' is not an IPv4 address"),
    ("duplicate-pod-id", _set("super_pod_list", [
        {"super_pod_id": "0", "server_list": [{"server_id": "10.0.1.1"}]},
        {"super_pod_id": "0", "server_list": [{"server_id": "10.0.1.2"}]}]),
     "$.super_pod_list[1].super_pod_id", "super_pod_id 0 is also used at $.super_pod_list[0]"),
    ("unknown-pod-server", _set("super_pod_list.0.server_list.1.server_id", "10.9.9.9"),
     "$.super_pod_list[0].server_list[1].server_id", "server 10.9.9.9 is not in server_list"),
    ("server-in-no-pod", _set("super_pod_list.0.server_list.1.server_id", "10.9.9.9"),
     "$.server_list[1].server_id", "server 10.0.1.2 is in no super pod of super_pod_list"),
    ("server-in-two-pods", _set("super_pod_list.0.server_list.1.server_id", "10.0.1.1"),
     "$.super_pod_list[0].server_list[1].server_id",
     "server 10.0.1.1 is also placed at $.super_pod_list[0].server_list[0].server_id"),
    ("duplicate-super-device", _set("server_list.1.device.0.super_device_id", "0"),
     "$.server_list[1].device[0].super_device_id",
     "super_device_id 0 is used twice in one super pod: also at "
     "$.server_list[0].device[0].super_device_id"),
]


@pytest.mark.parametrize(
    ("make", "mutate", "path", "message"),
    [(_a2_table, *case[1:]) for case in A2_CASES] + [(_a3_table, *case[1:]) for case in A3_CASES],
    ids=[case[0] for case in A2_CASES + A3_CASES],
)
def test_validation_catches(make: Callable[[], dict[str, Any]], mutate: Mutation, path: str,
                            message: str) -> None:
    table = copy.deepcopy(make())
    mutate(table)
    assert (path, message) in [(p.path, p.message) for p in validate(table)]


def test_forms_the_vendor_allows_are_valid() -> None:
    """IPv6 device IPs, device_port, 1.2 without super pods (AI Server mode), no device_ip on
    a single server: hicann/hccl rank_table_config_a2.md / a3.md."""
    table = _a2_table()
    for n, device in enumerate(table["server_list"][1]["device"]):
        device["device_ip"] = f"2001:db8::{n + 1:x}"
        device["device_port"] = "16667"
    assert validate(table) == []
    ai_server = _a3_table()
    ai_server.pop("super_pod_list")
    for server in ai_server["server_list"]:
        for device in server["device"]:
            device.pop("super_device_id")
    assert validate(ai_server) == []
    single = {"status": "completed", "version": "1.0", "server_count": "1", "server_list": [
        {"server_id": "node_0", "device": [{"device_id": "0", "rank_id": "0"},
                                           {"device_id": "1", "device_ip": "", "rank_id": "1"}]}]}
    assert validate(single) == []
    assert read(single)["servers"][0]["devices"][1]["device_ip"] is None
    one_pod = _a3_table()
    for device in one_pod["server_list"][0]["device"]:
        device.pop("device_ip")
    assert validate(one_pod) == []  # one super pod: device_ip may be left out


def test_super_pods_are_not_interleaved() -> None:
    table = _two_pod_table()
    table["server_list"][1], table["server_list"][2] = (table["server_list"][2],
                                                        table["server_list"][1])
    messages = [(p.path, p.message) for p in validate(table)]
    assert ("$.server_list[2]", "the servers of super pod $.super_pod_list[0] must be listed "
            "together in server_list (super pods not interleaved)") in messages


def test_validation_lists_every_problem() -> None:
    table = _a2_table()
    _set("server_count", "5")(table)
    _set("server_list.0.device.2.device_ip", "192.168.100.2")(table)
    assert [p.path for p in validate(table)] == [
        "$.server_count", "$.server_list[0].device[2].device_ip"]
    assert [p.path for p in validate([])] == ["$"]


def test_ranktable_filter_matches_build_and_raises_ansible_errors() -> None:
    module = importlib.import_module(FILTERS)
    filters = module.FilterModule().filters()
    planned = filters["device_ip_plan"](A2_FLEET)
    assert filters["ranktable"](planned, A2_SERVERS) == _a2_table()
    errors = importlib.import_module("ansible.errors")
    with pytest.raises(errors.AnsibleFilterError, match="no server IP for node-b"):
        filters["ranktable"](planned, {"node-a": "10.0.0.11"})
    with pytest.raises(errors.AnsibleFilterError, match="hosts"):
        filters["ranktable"]({"nodes": []}, {})


runner = CliRunner()


def test_cli_validate_exit_codes(tmp_path: Path) -> None:
    good = tmp_path / "hccl.json"
    good.write_text(json.dumps(_a2_table()))
    result = runner.invoke(app, ["ranktable", "validate", str(good)])
    assert result.exit_code == 0, result.output
    assert "version 1.0, 2 server(s), 16 rank(s)" in result.stdout

    bad_table = _a2_table()
    _set("server_list.1.device.0.rank_id", "0")(bad_table)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(bad_table))
    result = runner.invoke(app, ["ranktable", "validate", str(bad)])
    assert result.exit_code == 1
    assert "$.server_list[1].device[0].rank_id" in result.stdout
    assert "missing 8" in result.stdout
    as_json = runner.invoke(app, ["ranktable", "validate", "--json", str(bad)])
    assert as_json.exit_code == 1
    report = json.loads(as_json.stdout)
    assert report["ok"] is False and report["ranks"] == 16 and len(report["problems"]) == 2

    not_json = tmp_path / "not.json"
    not_json.write_text("{server_list:")
    result = runner.invoke(app, ["ranktable", "validate", str(not_json)])
    assert result.exit_code == 2
    assert "is not JSON" in result.stderr
    assert runner.invoke(app, ["ranktable", "validate", str(tmp_path / "nope.json")]).exit_code == 2


def test_cli_generate(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.yml"
    plan_file.write_text(yaml.safe_dump({**A2_FLEET, "servers": A2_SERVERS}))
    result = runner.invoke(app, ["ranktable", "generate", "--plan", str(plan_file)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == _a2_table()

    out = tmp_path / "hccl.json"
    result = runner.invoke(app, ["ranktable", "generate", "--plan", str(plan_file),
                                 "--output", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"output": str(out), "version": "1.0",
                                         "server_count": 2, "ranks": 16}
    assert json.loads(out.read_text()) == _a2_table()

    clash = {**A2_FLEET, "hosts": [*A2_FLEET["hosts"], {"name": "node-c", "chip": "910B",
                                                          "index": 0}],
             "servers": {**A2_SERVERS, "node-c": "10.0.0.13"}}
    plan_file.write_text(yaml.safe_dump(clash))
    result = runner.invoke(app, ["ranktable", "generate", "--plan", str(plan_file), "--json"])
    assert result.exit_code == 1
    assert ("192.168.100.1 is assigned to both host node-b device 0 and host node-c device 0"
            in json.loads(result.stdout)["problems"][0]["message"])

    plan_file.write_text("- just a list\n")
    result = runner.invoke(app, ["ranktable", "generate", "--plan", str(plan_file)])
    assert result.exit_code == 2
    assert "must be a mapping with a 'servers' mapping" in result.stderr


def test_plan_round_trips_through_model_dump() -> None:
    planned = plan(A2_FLEET)
    assert build(NetPlan.model_validate(planned.model_dump()), A2_SERVERS) == _a2_table()


# --- vllm-ascend prefill/decode table ------------------------------------------------------------


def _pd_table() -> dict[str, Any]:
    return build_pd(plan(A2_FLEET), A2_SERVERS, 4, 8)


def test_pd_table_as_gen_ranktable_writes_it() -> None:
    table = _pd_table()
    # Key order of vllm-ascend's gen_ranktable.py.
    assert list(table) == ["version", "server_count", "prefill_device_list",
                           "decode_device_list", "status"]
    assert table["version"] == "1.2" and table["server_count"] == "2"
    assert table["prefill_device_list"][0] == {
        "server_id": "10.0.0.12", "device_id": "0", "device_ip": "192.168.100.1",
        "cluster_id": "1"}
    assert [d["cluster_id"] for d in table["decode_device_list"]] == [
        str(n) for n in range(5, 13)]
    assert table["decode_device_list"][4] == {
        "server_id": "10.0.0.11", "device_id": "0", "device_ip": "192.168.100.9",
        "cluster_id": "9"}
    assert validate(table) == []
    assert read(table)["kind"] == "pd"


@pytest.mark.parametrize(
    ("prefill", "decode", "message"),
    [(0, 4, "prefill (0) and decode (4) need at least one device each"),
     (8, 9, "prefill 8 + decode 9 devices is more than the plan's 16")],
)
def test_pd_generation_problems(prefill: int, decode: int, message: str) -> None:
    with pytest.raises(RankTableError) as caught:
        build_pd(plan(A2_FLEET), A2_SERVERS, prefill, decode)
    assert [p.message for p in caught.value.problems] == [message]


def test_pd_generation_refuses_a3() -> None:
    with pytest.raises(RankTableError, match="vNIC"):
        build_pd(plan(A3_FLEET), {"a3-0": _a3_server("10.0.1.1", 0),
                                  "a3-1": _a3_server("10.0.1.2", 16)}, 8, 8)


PD_CASES: list[tuple[str, Mutation, str, str]] = [
    ("duplicate-cluster", _set("decode_device_list.0.cluster_id", "1"),
     "$.decode_device_list[0].cluster_id",
     "cluster_id 1 is used twice: also at $.prefill_device_list[0].cluster_id"),
    ("duplicate-ip", _set("decode_device_list.1.device_ip", "192.168.100.1"),
     "$.decode_device_list[1].device_ip",
     "device_ip 192.168.100.1 is used twice: also at $.prefill_device_list[0].device_ip"),
    ("duplicate-device", _set("decode_device_list.0.device_id", "0"), "$.decode_device_list[0]",
     "device 10.0.0.12 device 0 is used twice: also at $.prefill_device_list[0]"),
    ("bad-ip", _set("prefill_device_list.0.device_ip", "x"), "$.prefill_device_list[0].device_ip",
     "'x' is not an IPv4 or IPv6 address"),
    ("no-decode", lambda t: t.pop("decode_device_list"), "$",
     "'decode_device_list' is a required property"),
    ("server-count", _set("server_count", "1"), "$.server_count",
     "says 1 but the device lists name 2 servers"),
    ("half-a3", _set("prefill_device_list.0.super_device_id", "104857600"),
     "$.prefill_device_list[0]", "super_pod_id and super_device_id go together (A3)"),
    ("version", _set("version", "1.0"), "$.version", "'1.2' was expected"),
]


@pytest.mark.parametrize(("mutate", "path", "message"), [c[1:] for c in PD_CASES],
                         ids=[c[0] for c in PD_CASES])
def test_pd_validation_catches(mutate: Mutation, path: str, message: str) -> None:
    table = copy.deepcopy(_pd_table())
    mutate(table)
    assert (path, message) in [(p.path, p.message) for p in validate(table)]


def test_pd_a3_fields_on_every_device_or_none() -> None:
    table = _pd_table()
    for device in table["prefill_device_list"]:
        device.update(super_pod_id="0", super_device_id=str(104857600 + int(device["device_id"])))
    messages = [(p.path, p.message) for p in validate(table)]
    assert ("$.decode_device_list[0]", "super_pod_id/super_device_id are on some devices (A3) "
            "but not on this one") in messages
    for device in table["decode_device_list"]:
        device.update(super_pod_id="0", super_device_id=str(104857700 + int(device["device_id"])))
    assert validate(table) == []


def test_cli_generate_and_validate_pd(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.yml"
    plan_file.write_text(yaml.safe_dump({**A2_FLEET, "servers": A2_SERVERS}))
    out = tmp_path / "ranktable.json"
    result = runner.invoke(app, ["ranktable", "generate", "--plan", str(plan_file),
                                 "--prefill", "4", "--decode", "8", "--output", str(out),
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"output": str(out), "version": "1.2",
                                         "server_count": 2, "ranks": 12, "kind": "pd",
                                         "prefill": 4, "decode": 8}
    assert json.loads(out.read_text()) == _pd_table()
    result = runner.invoke(app, ["ranktable", "validate", str(out)])
    assert result.exit_code == 0, result.output
    assert "prefill/decode table, version 1.2, 4 prefill and 8 decode device(s)" in result.stdout
    report = json.loads(runner.invoke(app, ["ranktable", "validate", "--json", str(out)]).stdout)
    assert (report["kind"], report["prefill"], report["decode"], report["ranks"]) == (
        "pd", 4, 8, 12)
    result = runner.invoke(app, ["ranktable", "generate", "--plan", str(plan_file),
                                 "--prefill", "4"])
    assert result.exit_code == 2
    assert "--prefill and --decode go together" in result.stderr
    result = runner.invoke(app, ["ranktable", "generate", "--plan", str(plan_file),
                                 "--prefill", "10", "--decode", "10", "--json"])
    assert result.exit_code == 1
    assert "more than the plan's 16" in json.loads(result.stdout)["problems"][0]["message"]
