"""The fault classifier: its data (the vendor's tables as imported, the project's rules), the
class order, and every real sample of ``tests/data/corpus/faults/`` read as a human reads it.

The other corpus families (npu-smi tables, hccn_tool answers, vLLM start logs, version files)
are read too: the classifier must find in them exactly the faults listed here, no more (a fault
code in a healthy table would be a false alarm that drains a host).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from corpus import reading
from paths import CORPUS, ROOT

from ascend_serve.doctor.faults import Classifier, FaultDataError, classifier
from ascend_serve.doctor.faults import docs as fault_docs
from ascend_serve.doctor.faults.classifier import _shipped
from ascend_serve.doctor.faults.explain import explain
from ascend_serve.doctor.faults.vendor_import import (
    CHIP_LISTS,
    SWITCH_LISTS,
    VENDOR_ORDER,
    VendorImportError,
    build,
)

FAULTS = CORPUS / "faults"
META = {"SOURCES", "README.md"}
SAMPLES = sorted(p for p in FAULTS.iterdir()
                 if p.name not in META and not p.name.endswith(".expected.json"))
VENDOR_CLASSES = {"NotHandleFault", "RestartRequest", "RestartBusiness", "FreeRestartNPU",
                  "RestartNPU", "SeparateNPU", "PreSeparateNPU", "SubHealthFault"}
COMMIT = "22bb3d987bc0208c3eb7395e222b661276133c58"


def _fresh() -> tuple[dict[str, Any], dict[str, Any]]:
    vendor, rules = _shipped()
    return json.loads(json.dumps(vendor)), json.loads(json.dumps(rules))


# --- the vendor's tables as shipped ----------------------------------------------------------


def test_the_chip_table_has_the_vendors_counts_and_the_worse_class_wins() -> None:
    vendor, _ = _shipped()
    chip = vendor["chip"]
    assert vendor["repository"] == "Ascend/mind-cluster" and vendor["commit"] == COMMIT
    assert chip["path"] == "component/ascend-device-plugin/build/faultCode.json"
    # 804 entries in 8 lists; 802 distinct codes: A2301001 is listed under RestartBusiness and
    # SeparateNPU (the worse, SeparateNPU, wins), B4060011 twice under RestartBusiness.
    assert chip["entries"] == 804
    assert chip["unique"] == len(chip["codes"]) == 802
    assert chip["in_several_classes"] == {"A2301001": ["SeparateNPU", "RestartBusiness"]}
    assert chip["repeated_in_one_class"] == {"B4060011": "RestartBusiness"}
    assert chip["codes"]["A2301001"] == "SeparateNPU"
    per_class = {name: sum(1 for k in chip["codes"].values() if k == name)
                 for name in VENDOR_CLASSES}
    assert per_class == {"SeparateNPU": 215, "PreSeparateNPU": 200, "RestartNPU": 162,
                         "NotHandleFault": 132, "RestartRequest": 33, "RestartBusiness": 24,
                         "FreeRestartNPU": 23, "SubHealthFault": 13}
    assert sum(per_class.values()) == 802
    switch = vendor["switch"]
    assert switch["path"] == "component/ascend-device-plugin/build/SwitchFaultCode.json"
    assert switch["entries"] == switch["unique"] == 30


def test_the_importer_keeps_the_worse_class_and_refuses_what_it_does_not_know() -> None:
    chip: dict[str, list[str]] = {key: [] for key in CHIP_LISTS}
    chip["NotHandleFaultCodes"] = ["AAAA0001", "AAAA0002"]
    chip["SeparateNPUCodes"] = ["AAAA0001"]
    chip["RestartNPUCodes"] = ["AAAA0002", "AAAA0002"]
    switch: dict[str, list[str]] = {key: [] for key in SWITCH_LISTS}
    data = build(chip, switch, "0" * 40)
    assert data["chip"]["codes"] == {"AAAA0001": "SeparateNPU", "AAAA0002": "RestartNPU"}
    assert data["chip"]["in_several_classes"] == {
        "AAAA0001": ["SeparateNPU", "NotHandleFault"],
        "AAAA0002": ["RestartNPU", "NotHandleFault"]}
    assert data["chip"]["entries"] == 5 and data["chip"]["unique"] == 2
    with pytest.raises(VendorImportError, match="unknown lists"):
        build({**chip, "NewLevelCodes": []}, switch, "0" * 40)
    with pytest.raises(VendorImportError, match="decide their class"):
        build(chip, {**switch, "ResetFaultCodes": ["[0x1,1,na,na]"]}, "0" * 40)


# --- classes and their order -------------------------------------------------------------------


def test_every_class_has_one_row_and_the_vendor_order_is_kept() -> None:
    clf = classifier()
    names = list(clf.classes)
    assert set(names) >= VENDOR_CLASSES
    own = [n for n in names if clf.classes[n].source == "ascend-serve"]
    assert set(names) - VENDOR_CLASSES == set(own) and own
    # The vendor's eight keep the device plugin's order (getMostSeriousFaultType).
    assert [n for n in names if n in VENDOR_CLASSES] == list(VENDOR_ORDER)
    assert len({clf.classes[n].action for n in names}) == len(names)  # one action per class
    assert clf.blocking() == ["SeparateNPU", "PreSeparateNPU", "RestartNPU", "FreeRestartNPU",
                              *own]


@pytest.mark.parametrize(("names", "worst"), [
    (["NotHandleFault", "SubHealthFault"], "SubHealthFault"),
    (["RestartBusiness", "RestartNPU", "NotHandleFault"], "RestartNPU"),
    (["FreeRestartNPU", "PreSeparateNPU"], "PreSeparateNPU"),
    (["FixNetwork", "RestartBusiness"], "FixNetwork"),
    (["FixServing", "RestartNPU"], "RestartNPU"),
    (["SeparateNPU", "FixHost", "PreSeparateNPU"], "SeparateNPU"),
    ([None, "RestartRequest"], "RestartRequest"),
    ([], None),
])
def test_the_worst_class(names: list[str | None], worst: str | None) -> None:
    assert classifier().worst(names) == worst


def test_severity_follows_the_class() -> None:
    clf = classifier()
    assert clf.severity("SeparateNPU") == clf.severity("FixHost") == "error"
    assert clf.severity("RestartBusiness") == clf.severity("SubHealthFault") == "warning"
    assert clf.severity("NotHandleFault") == "info"


# --- the data refuses to be inconsistent ------------------------------------------------------


def test_a_rule_citing_an_unknown_source_is_refused() -> None:
    vendor, rules = _fresh()
    rules["faults"][0]["cites"].append("nowhere")
    with pytest.raises(FaultDataError, match="nowhere"):
        Classifier(vendor, rules)


def test_a_rule_claiming_a_vendor_code_or_an_unknown_class_is_refused() -> None:
    vendor, rules = _fresh()
    rules["faults"][0]["codes"].append("8C03A000")
    with pytest.raises(FaultDataError, match="8C03A000"):
        Classifier(vendor, rules)
    vendor, rules = _fresh()
    rules["faults"][0]["class"] = "Reboot"
    with pytest.raises(FaultDataError, match="Reboot"):
        Classifier(vendor, rules)


def test_every_rule_links_only_known_problems_and_cites_its_sources() -> None:
    from ascend_serve.doctor.known_problems import KNOWN_PROBLEMS

    clf = classifier()
    for rule in clf.rules:
        assert rule.problem is None or rule.problem in KNOWN_PROBLEMS, rule.id
        assert rule.cites and rule.meaning and rule.fix and (rule.codes or rule.keywords)
        assert clf.classes[rule.fault_class]


# --- lookups -------------------------------------------------------------------------------


def test_lookup_by_code() -> None:
    clf = classifier()
    chip = clf.lookup("0x80e18005")
    assert chip is not None and chip.fault_class == "RestartNPU" and chip.code == "80E18005"
    assert chip.source.startswith("vendor: Ascend/mind-cluster") and COMMIT in chip.source
    switch = clf.lookup("[0x00f1fef5,155912,npu,na]")
    assert switch is not None and switch.fault_class == "SeparateNPU"
    own = clf.lookup("EI0006")
    assert own is not None and own.source == "ascend-serve" and own.fault_class == "FixNetwork"
    assert clf.lookup("FFFFFFFF") is None and clf.lookup("EH9999") is None


def test_the_knowledge_base_adds_the_vendors_cause() -> None:
    vendor, rules = _fresh()
    kb = {"knowledge-repository": {"0x80E18005": {"attribute": {"cause_en": "HBMC parity"}}}}
    fault = Classifier(vendor, rules, kb).lookup("80E18005")
    assert fault is not None and "MindCluster knowledge base: HBMC parity" in fault.meaning


# --- the corpus --------------------------------------------------------------------------------


def test_the_fault_corpus_is_there() -> None:
    assert len(SAMPLES) >= 20


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_each_sample_reads_as_a_human_reads_it(sample: Path) -> None:
    expected = reading(sample)
    found = explain(sample.read_text(encoding="utf-8"), classifier())
    got = [{"code": f.code, "rule": f.rule, "class": f.fault_class} for f in found.faults]
    assert sorted(got, key=json.dumps) == sorted(expected["faults"], key=json.dumps)
    assert sorted(found.unknown_codes) == sorted(expected["unknown_codes"])
    assert found.worst_class == expected["worst_class"]
    for fault in found.faults:
        assert fault.evidence and fault.lines and fault.fix and fault.meaning


# Samples of the other families that show a fault (the rest must show none).
ELSEWHERE: dict[str, set[tuple[str, str]]] = {
    "vllm-log/ascend-deepseek-r1-w8a8-npu-oom-issue1127.log": {("npu-out-of-memory", "")},
    "vllm-log/ascend-qwen3-vl-engine-timeout-issue3800.log": {("engine-ready-timeout", "")},
    "hccn_tool/net-health-fault-doc.txt": {("device-nic-unhealthy", "")},
}
OTHERS = sorted(p for family in CORPUS.iterdir() if family.is_dir() and family != FAULTS
                for p in family.iterdir()
                if p.is_file() and p.name not in META and ".expected." not in p.name
                and not p.name.endswith(".expected.json"))


def test_the_other_families_are_read_too() -> None:
    assert len(OTHERS) >= 100
    for name in ELSEWHERE:
        assert (CORPUS / name).is_file(), name


@pytest.mark.parametrize("sample", OTHERS, ids=[f"{p.parent.name}/{p.name}" for p in OTHERS])
def test_other_samples_show_only_their_faults(sample: Path) -> None:
    key = f"{sample.parent.name}/{sample.name}"
    found = classifier().scan(sample.read_text(encoding="utf-8", errors="replace"))
    assert {(f.rule, f.code) for f in found.faults} == ELSEWHERE.get(key, set())


def test_every_rule_is_shown_by_a_sample_or_documented_as_unseen() -> None:
    seen = fault_docs.seen_codes(CORPUS)
    page = (ROOT / "docs" / "fault-codes.md").read_text(encoding="utf-8")
    for rule in classifier().rules:
        if not any(k in seen for k in (*rule.codes, rule.id)):
            row = next(line for line in page.splitlines() if line.startswith(f"| `{rule.id}`"))
            assert "no sample here" in row, rule.id


def test_the_generated_page_is_current() -> None:
    """docs/fault-codes.md is the rendering of the data: regenerate it with
    ``python -m ascend_serve.doctor.faults.docs > docs/fault-codes.md``."""
    rendered = fault_docs.render(classifier(), fault_docs.seen_codes(CORPUS))
    assert (ROOT / "docs" / "fault-codes.md").read_text(encoding="utf-8") == rendered
    vendor, _ = _shipped()
    unseen = set(vendor["chip"]["codes"]) - set(fault_docs.seen_codes(CORPUS))
    for code in sorted(unseen)[:50]:
        assert f"`{code}`" in rendered


def test_the_rules_file_is_plain_yaml_with_ids_once() -> None:
    rules = yaml.safe_load(_shipped_rules_text())
    ids = [r["id"] for r in rules["faults"]]
    assert len(ids) == len(set(ids))


def _shipped_rules_text() -> str:
    from ascend_serve.resources import data_path

    return data_path("faults", "rules.yml").read_text(encoding="utf-8")
