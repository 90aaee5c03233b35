"""The memory fit against the HBM the node's chips report (npu-smi's ``HBM-Usage(MB)`` total,
read from real samples of the corpus), not a constant: the reader's per-chip HBM, the fit with an
HBM input, ``ascend-serve serve``'s node check and the ``serving_fit`` filter, and the facts
module on a host without npu-smi (before the driver is installed)."""

# The fit writes budgets as "32 GiB × 0.92": the multiplication sign is on purpose.
# ruff: noqa: RUF001, RUF003

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
from ansible_run import module_result
from paths import CORPUS

from ansible_collections.ascend_serve.fleet.plugins.module_utils.npu_smi import (
    hbm_total_mb,
    read_chips,
)
from ascend_serve.serving import nodecheck
from ascend_serve.serving.fit import FitError, estimate
from ascend_serve.serving.profiles import resolve
from ascend_serve.stack.npusmi import parse_info

NPU_SMI = CORPUS / "npu-smi"
SAMPLE_910B4 = NPU_SMI / "a2-910b4-25.0.rc1.1-8card.txt"


@pytest.mark.parametrize(("sample", "total"), [
    ("a2-910b4-25.0.rc1.1-8card.txt", 32768),      # 8 x 910B4
    ("a2-910b4-23.0.6-2card.txt", 32768),
    ("a2-910b3-24.1.rc1-procs-java.txt", 65536),   # 8 x 910B3
    ("a2-910b2c-25.0.rc1.2-procs.txt", 65536),
    ("a3-25.0.rc1-16chip.txt", 65536),             # A3, two chips per NPU
    ("310p3-23.0.0-npu24.txt", None),              # 310P3 prints Memory-Usage, no HBM
])
def test_the_reader_gives_the_hbm_of_one_chip(sample: str, total: int | None) -> None:
    chips = read_chips((NPU_SMI / sample).read_text(encoding="utf-8"))
    assert chips, sample
    assert hbm_total_mb(chips) == total


def test_the_smallest_chip_counts_and_a_table_without_chips_tells_nothing() -> None:
    chips = read_chips(SAMPLE_910B4.read_text(encoding="utf-8"))
    mixed = [dict(c) for c in chips]
    mixed[0]["hbm_total_mb"] = 65536
    assert hbm_total_mb(mixed) == 32768
    assert hbm_total_mb([]) is None


R1_2XA2: dict[str, Any] = {"weight_dtype": "w8a8", "max_model_len": 16384, "max_num_seqs": 16,
                           "tensor_parallel": 4, "data_parallel": 4, "expert_parallel": True,
                           "gpu_memory_utilization": 0.92, "chips": 16}


def test_the_fit_takes_the_chips_hbm_and_names_where_it_was_read() -> None:
    config = resolve("deepseek-r1-w8a8-2xa2").model.config
    assert config is not None
    nominal = estimate(config, chip="910B", **R1_2XA2)
    assert nominal.fits and nominal.hbm_gib == 64 and nominal.hbm_source == "nominal"
    measured = estimate(config, chip="910B", hbm_gib=32, hbm_source="npu-smi on node-a",
                        **R1_2XA2)
    assert not measured.fits
    assert measured.hbm_gib == 32 and measured.hbm_source == "npu-smi on node-a"
    assert measured.budget_gib == pytest.approx(29.44)
    assert ("exceed the 29.44 GiB budget (32 GiB × 0.92; HBM per chip from npu-smi on node-a)"
            in measured.reason)
    # The same chips with their 64 GiB fit, whatever the chip's name.
    assert estimate(config, chip="910B", hbm_gib=64, hbm_source="npu-smi", **R1_2XA2).fits
    with pytest.raises(FitError, match="hbm_gib must be positive"):
        estimate(config, chip="910B", hbm_gib=0, **R1_2XA2)


def test_serve_check_reads_the_hbm_from_npu_smi() -> None:
    chips = parse_info(SAMPLE_910B4.read_text(encoding="utf-8"))
    assert nodecheck.hbm_gib(chips) == 32
    profile = resolve("deepseek-r1-w8a8-2xa2")
    refused = nodecheck.check_fit(profile, None, nodecheck.hbm_gib(chips))
    assert not refused.ok
    assert "32 GiB × 0.92; HBM per chip from npu-smi" in refused.detail
    assert nodecheck.check_fit(profile, None).ok  # nominal 910B: 64 GiB
    assert nodecheck.check_fit(resolve("deepseek-r1-distill-qwen-7b"), None, 32).ok
    # A CPU profile is estimated against its memory_gib whatever HBM is passed.
    tiny = resolve("tiny-qwen2")
    config = {"model_type": "qwen2", "vocab_size": 1000, "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
              "num_key_value_heads": 1, "max_position_embeddings": 512}
    tiny = tiny.model_copy(update={"model": tiny.model.model_copy(update={"config": config})})
    report = nodecheck.fit_report(tiny, None, 1.0)
    assert report is not None and report.hbm_gib == tiny.memory_gib


def test_the_filter_takes_npu_smis_megabytes() -> None:
    errors: Any = importlib.import_module("ansible.errors")
    filters = importlib.import_module(
        "ansible_collections.ascend_serve.fleet.plugins.filter.serving").FilterModule().filters()
    profile = filters["serving_profile"]("deepseek-r1-w8a8-2xa2")
    assert filters["serving_fit"](profile)["fits"] is True
    small = filters["serving_fit"](profile, None, 32768, "npu-smi on node-a")
    assert small["fits"] is False and small["hbm_gib"] == 32
    assert small["hbm_source"] == "npu-smi on node-a"
    assert filters["serving_fit"](profile, None, 65536, "npu-smi on node-a")["fits"] is True
    with pytest.raises(errors.AnsibleFilterError, match="hbm_mb must be a number of MB"):
        filters["serving_fit"](profile, None, "lots")


def test_the_facts_module_without_npu_smi(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-driver-yet" / "npu-smi")
    absent = module_result("npu_smi_facts", {"npu_smi": missing, "missing_ok": True}, tmp_path)
    facts = absent["ansible_facts"]["ascend_npu_smi"]
    assert facts["present"] is False and facts["chips"] == [] and facts["hbm_total_mb"] is None
    # Without missing_ok a missing npu-smi still fails the task.
    failed = module_result("npu_smi_facts", {"npu_smi": missing}, tmp_path)
    assert failed.get("failed") is True


def test_the_facts_module_reports_the_hbm_of_one_chip(tmp_path: Path) -> None:
    tool = tmp_path / "npu-smi"
    tool.write_text(f"#!/bin/sh\nexec cat '{SAMPLE_910B4}'\n")
    tool.chmod(0o755)
    result = module_result("npu_smi_facts", {"npu_smi": str(tool), "boards": False,
                                             "missing_ok": True}, tmp_path)
    facts = result["ansible_facts"]["ascend_npu_smi"]
    assert facts["present"] is True and len(facts["chips"]) == 8
    assert facts["hbm_total_mb"] == 32768
