"""Rank tables: generation from a plan (1.0 and 1.2), validation, filter and CLI."""

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

from ascend_serve.cli import app
from ascend_serve.netplan import NetPlan, plan
from ascend_serve.ranktable import SCHEMA_PATH, RankTableError, build, validate

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


def _a3_table(**servers: Any) -> dict[str, Any]:
    fleet = {"subnets": ["10.20.0.0/24"],
             "hosts": [{"name": "a3-0", "chip": "910C"}, {"name": "a3-1", "chip": "910C"}]}
    return build(plan(fleet), {"a3-0": "10.0.1.1", "a3-1": "10.0.1.2", **servers})


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
    assert second["device"][3] == {"device_id": "3", "device_ip": "10.20.0.20",
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


def test_one_table_does_not_mix_a2_and_a3() -> None:
    mixed = plan({"subnets": ["10.0.0.0/24"], "hosts": [
        {"name": "a2", "chip": "910B"}, {"name": "a3", "chip": "910C", "index": 1}]})
    with pytest.raises(RankTableError, match=r"cannot mix 910C \(version 1\.2\) with 910B"):
        build(mixed, {"a2": "10.0.0.1", "a3": "10.0.0.2"})


def test_schema_file_is_a_valid_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA_PATH.read_text()))


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
    ("missing-field", _drop("device_ip"), "$.server_list[0].device[0]",
     "'device_ip' is a required property"),
    ("bad-ip", _set("server_list.0.device.1.device_ip", "192.168.100.300"),
     "$.server_list[0].device[1].device_ip", "'192.168.100.300' is not a 'ipv4'"),
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
     "version 1.2 needs super_device_id on every device"),
    ("no-super-pods", lambda t: t.pop("super_pod_list"), "$",
     "version 1.2 needs a super_pod_list"),
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
