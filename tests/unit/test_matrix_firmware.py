"""Firmware in the version set: each Ascend row names its HDK release's firmware with a source,
or says why it is unresolved; pins and npu_driver's default read it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from paths import DATA, ROOT

from ascend_serve.mirror.inventory import read_hosts, resolved_sets
from ascend_serve.stack.matrix import MatrixError, load_matrix, parse_matrix, resolve


def _data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DATA / "stack-matrix.yml").read_text())
    return data


def test_every_ascend_set_cites_its_firmware_or_says_why_not() -> None:
    matrix = load_matrix(DATA / "stack-matrix.yml")
    firmware = {s.hdk: s.firmware for s in matrix.sets if s.platform == "ascend"}
    # HDK 25.3.RC1 ships 7.8.0.2.212 and HDK 25.5.0 ships 7.8.0.5.216 (the vendor's download
    # paths, cited in sources.firmware); the others are unresolved and say so.
    assert firmware["25.3.rc1"] == "7.8.0.2.212"
    assert firmware["25.5.0"] == "7.8.0.5.216"
    for s in matrix.sets:
        if s.platform != "ascend":
            assert s.firmware is None
            continue
        source = str(s.sources["firmware"])
        assert (s.firmware is not None and s.firmware in source) or \
            (s.firmware is None and source.startswith("unresolved")), (s.name, source)


def test_a_row_without_a_firmware_source_is_refused() -> None:
    data = copy.deepcopy(_data())
    row = next(r for r in data["sets"] if r["name"] == "vllm-ascend-0.13.0")
    del row["sources"]["firmware"]
    with pytest.raises(MatrixError,
                       match=r"sources\.firmware must cite the firmware of HDK 25\.5\.0"):
        parse_matrix(data)
    cpu = next(r for r in _data()["sets"] if r.get("platform") == "cpu")
    with pytest.raises(MatrixError, match="a cpu set has no firmware"):
        parse_matrix({"sets": [{**cpu, "firmware": "7.8.0.5.216"}]})


def test_firmware_is_a_pinnable_component() -> None:
    matrix = load_matrix(DATA / "stack-matrix.yml")
    assert resolve(matrix, None, {"firmware": "7.8.0.5.216"}).name == "vllm-ascend-0.13.0"
    with pytest.raises(MatrixError, match=r"firmware 7.8.0.2.212 \(set has 7.8.0.5.216\)"):
        resolve(matrix, "vllm-ascend-0.13.0", {"firmware": "7.8.0.2.212"})


def test_npu_driver_takes_the_firmware_from_the_set() -> None:
    """The role default: the set's firmware where the inventory names none; nothing where the
    set's is unresolved (the role then refuses, naming the set); the inventory's where it sets
    one (inventories/local)."""
    matrix = load_matrix(DATA / "stack-matrix.yml")
    (host,) = read_hosts(ROOT / "inventories" / "prod", "a2-node-01")
    for name, expected in (("vllm-ascend-0.13.0", "7.8.0.5.216"), ("vllm-ascend-0.18.0", "")):
        stack = resolve(matrix, name)
        assert host.with_vars(ascend_stack_resolved=stack.as_facts()).get(
            "npu_driver_firmware_version") == expected
    (local,) = read_hosts(ROOT / "inventories" / "local")
    assert local.with_vars(ascend_stack_resolved=resolved_sets(local, matrix)).get(
        "npu_driver_firmware_version") == local.variables["npu_driver_firmware_version"]
