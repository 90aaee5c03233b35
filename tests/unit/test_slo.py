"""SLOs of ``ascend-serve bench``: expressions, YAML files, presets, verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_serve.bench import slo
from ascend_serve.bench.slo import (
    PRESETS,
    Slo,
    SloError,
    Target,
    evaluate,
    parse_expression,
    resolve,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("ttft_ms:p99<=2000", Target("p99_ttft_ms", "<=", 2000.0)),
    ("ttft:p99.9 <= 2500", Target("p99.9_ttft_ms", "<=", 2500.0)),
    ("tpot_ms:mean<=42", Target("mean_tpot_ms", "<=", 42.0)),
    ("itl_ms:median<50", Target("median_itl_ms", "<", 50.0)),
    ("e2el_ms:P90<=9000", Target("p90_e2el_ms", "<=", 9000.0)),
    ("request_throughput>=120/card", Target("request_throughput", ">=", 120.0, per_card=True)),
    ("output_throughput >= 478 / card", Target("output_throughput", ">=", 478.0, True)),
    ("failed<=0", Target("failed", "<=", 0.0)),
    ("p99_ttft_ms<=10", Target("p99_ttft_ms", "<=", 10.0)),
])
def test_expressions_name_the_vllm_fields(text: str, expected: Target) -> None:
    assert parse_expression(text) == expected


def test_a_latency_without_a_statistic_is_a_per_request_threshold() -> None:
    assert parse_expression("ttft_ms<=2000") == ("ttft", 2000.0)
    assert parse_expression("tpot<100") == ("tpot", 100.0)
    combined = slo.from_expressions(["tpot_ms<=100", "ttft_ms:p99<=2000"])
    assert combined.per_request_ms == {"tpot": 100.0}
    assert combined.targets == (Target("p99_ttft_ms", "<=", 2000.0),)
    assert combined.percentiles() == {99.0}


@pytest.mark.parametrize(("text", "message"), [
    ("ttft_ms:p99=2000", "cannot read the SLO"),
    ("latency:p99<=5", "not a latency"),
    ("ttft_ms:p101<=5", "within 0..100"),
    ("ttft_ms:worst<=5", "not a statistic"),
    ("goodness>=5", "unknown metric"),
    ("itl_ms<=5", "for ITL give a statistic"),
    ("ttft_ms>=5", "upper bound"),
    ("tpot_ms<=5/card", "upper bound"),
    ("failed<=-1", "number >= 0"),
    ("ttft_ms:p99<=1e999", "number >= 0"),
])
def test_bad_expressions_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(SloError, match=message):
        parse_expression(text)


def test_resolve_merges_presets_files_and_expressions(tmp_path: Path) -> None:
    file = tmp_path / "mine.yaml"
    file.write_text("name: mine\ndescription: my service\nper_request: {ttft_ms: 1500}\n"
                    "targets:\n  - 'ttft_ms:p90<=1000'\n"
                    "  - {metric: request_throughput, op: '>=', value: 2, per_card: true}\n")
    merged = resolve(["interactive", f"{file},e2el_ms:p99<=9000"])
    assert merged is not None
    assert merged.name == "interactive+mine+custom"
    # The stricter per-request threshold wins; every target is kept.
    assert merged.per_request_ms == {"ttft": 1500.0, "tpot": 100.0}
    metrics = {t.metric for t in merged.targets}
    assert {"p99_ttft_ms", "p99_tpot_ms", "failed", "p90_ttft_ms", "request_throughput",
            "p99_e2el_ms"} <= metrics
    assert merged.percentiles() == {90.0, 99.0}
    assert resolve([]) is None


@pytest.mark.parametrize(("content", "message"), [
    ("- a list\n", "expected a mapping"),
    ("name: x\n", "no per_request threshold and no target"),
    ("per_request: {itl_ms: 5}\n", "per_request takes"),
    ("targets: [{metric: failed, op: '==', value: 0}]\n", "a target needs"),
    ("targets: [42]\n", "a target is an expression or a mapping"),
    ("target: []\n", "unknown keys target"),
    ("targets: [':']\n", "cannot read the SLO"),
])
def test_bad_slo_files_are_refused(tmp_path: Path, content: str, message: str) -> None:
    file = tmp_path / "slo.yml"
    file.write_text(content)
    with pytest.raises(SloError, match=message):
        slo.load_file(file)


def test_unknown_slo_words_are_refused() -> None:
    with pytest.raises(SloError, match="not a preset"):
        resolve(["fast-please"])
    with pytest.raises(SloError, match="cannot read the SLO file"):
        resolve(["missing.yaml"])


def test_presets_are_complete_and_explain_themselves() -> None:
    assert {"guide-customer-service", "interactive", "vllm-ascend-r1-0528-a2-pd",
            "vllm-ascend-v3.1-a3", "tiny-cpu"} <= set(PRESETS)
    for name, preset in PRESETS.items():
        assert preset.name == name
        assert preset.description
        assert preset.targets
        for target in preset.targets:
            assert slo.metric_field(target.metric) == target.metric
    guide = PRESETS["guide-customer-service"]
    assert "time per output token" in guide.description
    assert Target("mean_tpot_ms", "<=", 35.0) in guide.targets
    assert Target("request_throughput", ">=", 120.0, per_card=True) in guide.targets
    r1 = PRESETS["vllm-ascend-r1-0528-a2-pd"]
    assert {t.metric: t.value for t in r1.targets if "ms" in t.metric} == {
        "mean_ttft_ms": 3700.0, "mean_tpot_ms": 42.0}
    v31 = PRESETS["vllm-ascend-v3.1-a3"]
    assert {t.metric: t.value for t in v31.targets if "ms" in t.metric} == {
        "mean_ttft_ms": 6200.0, "mean_tpot_ms": 49.0}


METRICS = {"completed": 10, "failed": 0, "request_throughput": 125.0, "mean_tpot_ms": 30.0,
           "p99_ttft_ms": 1800.0, "p99_tpot_ms": 120.0}


def test_the_guide_preset_scales_with_the_cards() -> None:
    guide = PRESETS["guide-customer-service"]
    one = evaluate(METRICS, guide, cards=1)
    assert one.passed
    four = evaluate(METRICS, guide, cards=4)  # 480 QPS on 4 cards
    assert not four.passed
    failing = [r for r in four.results if not r.passed]
    assert [(r.target.metric, r.threshold, r.measured) for r in failing] == [
        ("request_throughput", 480.0, 125.0)]
    assert "480 (120/card x 4 cards)" in four.lines()[1]
    assert four.to_dict()["verdict"] == "FAIL"


def test_verdicts_compare_each_target() -> None:
    verdict = evaluate(METRICS, PRESETS["interactive"])
    assert not verdict.passed
    assert [(r.target.metric, r.passed) for r in verdict.results] == [
        ("p99_ttft_ms", True), ("p99_tpot_ms", False), ("failed", True)]
    assert verdict.lines()[1] == "FAIL p99_tpot_ms <= 100: measured 120"


def test_a_latency_target_cannot_pass_without_a_completed_request() -> None:
    nothing = {**METRICS, "completed": 0, "failed": 10, "p99_ttft_ms": 0.0}
    verdict = evaluate(nothing, slo.from_expressions(["ttft_ms:p99<=2000"]))
    assert not verdict.passed
    assert verdict.results[0].note == "no completed request"


def test_an_unmeasured_metric_fails() -> None:
    verdict = evaluate(METRICS, Slo("x", targets=(Target("p95_ttft_ms", "<=", 1.0),)))
    assert not verdict.passed
    assert verdict.results[0].measured is None
    with pytest.raises(SloError, match="cards"):
        evaluate(METRICS, PRESETS["interactive"], cards=0)
