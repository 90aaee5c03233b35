"""module_utils/fault_codes.py, the module npu_faults' reading and the fault filters (issue #32):
classes and their order, the health page's codes, a fault's lifetime, the policy window and the
restart rate limit. The health pages are the corpus's real ones."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError  # type: ignore[import-untyped]
from paths import CORPUS

from ansible_collections.ascend_serve.fleet.plugins.filter import faults as fault_filters
from ansible_collections.ascend_serve.fleet.plugins.module_utils import fault_codes
from ansible_collections.ascend_serve.fleet.plugins.module_utils.npu_smi import read_health
from ansible_collections.ascend_serve.fleet.plugins.modules import npu_faults
from ascend_serve.resources import data_path

TABLE = fault_codes.load_table(data_path("faults", "vendor_codes.json").read_text())
# The fixture's first line is the command it ran; the page follows.
ALARM = (CORPUS / "faults" / "npu-smi-t-health-alarm-3codes-mindcluster-fixture.txt"
         ).read_text().split("\n", 1)[1]
OK = (CORPUS / "npu-smi" / "info-t-health-ok-doc.txt").read_text()


def test_the_real_alarm_page_gives_three_codes_and_their_classes() -> None:
    codes = npu_faults.chip_faults(npu_faults.read_health_page(ALARM), TABLE)
    assert codes == [{"code": "A4025021", "class": "NotHandleFault"},
                     {"code": "8C03A000", "class": "RestartNPU"},
                     {"code": "8C084E00", "class": "FreeRestartNPU"}]
    assert fault_codes.worst(c["class"] for c in codes) == "RestartNPU"
    assert npu_faults.chip_faults(read_health(OK), TABLE) == []


def test_a_code_not_in_the_table_is_unknown_and_a_bad_token_refused() -> None:
    assert fault_codes.classify("0x12345678", TABLE) == fault_codes.UNKNOWN
    assert fault_codes.health_codes("0x80E18402") == ["80E18402"]
    with pytest.raises(fault_codes.FaultCodeError, match="not a chip fault code"):
        fault_codes.health_codes("heartbeat")


def test_build_marks_busy_chips_and_keeps_the_host_worst() -> None:
    chips = [{"npu": 0, "chip": 0, "health": "Alarm"}, {"npu": 1, "chip": 0, "health": "OK"}]
    pages = {(0, 0): npu_faults.read_health_page(ALARM), (1, 0): read_health(OK)}
    fact = npu_faults.build(chips, [{"npu": 1, "chip": 0, "pid": 7}], pages, TABLE, {},
                            "2026-12-06T09:00:00Z")
    assert fact["worst"] == "RestartNPU"
    assert [c["idle"] for c in fact["chips"]] == [True, False]
    assert sorted(fact["faults"]) == ["0/0/8C03A000", "0/0/8C084E00", "0/0/A4025021"]


def test_a_fault_lifetime_present_cleared_and_back() -> None:
    seen = [{"npu": 0, "chip": 0, "codes": [{"code": "80E18402", "class": "SeparateNPU"}]}]
    first = fault_codes.lifetime({}, seen, "2026-12-06T09:00:00Z")
    assert first["0/0/80E18402"]["state"] == "present"
    again = fault_codes.lifetime(first, seen, "2026-12-06T10:00:00Z")
    assert again == first  # a re-run changes nothing
    cleared = fault_codes.lifetime(again, [], "2026-12-06T11:00:00Z")
    assert cleared["0/0/80E18402"]["state"] == "cleared"
    assert cleared["0/0/80E18402"]["cleared_at"] == "2026-12-06T11:00:00Z"
    assert fault_codes.lifetime(cleared, [], "2026-12-06T12:00:00Z") == cleared
    back = fault_codes.lifetime(cleared, seen, "2026-12-06T13:00:00Z")
    assert back["0/0/80E18402"]["first_seen"] == "2026-12-06T13:00:00Z"


@pytest.mark.parametrize(("cls", "cleared", "now", "blocked"), [
    ("SeparateNPU", "", "2026-12-06T09:00:00Z", True),
    ("RestartNPU", "2026-12-06T09:00:00Z", "2026-12-06T09:59:59Z", True),
    ("RestartNPU", "2026-12-06T09:00:00Z", "2026-12-06T10:00:00Z", False),
    ("RestartBusiness", "", "2026-12-06T09:00:00Z", False),
    ("NotHandleFault", "", "2026-12-06T09:00:00Z", False),
    (None, "", "2026-12-06T09:00:00Z", False),
])
def test_fault_blocks_within_the_window(cls: str | None, cleared: str, now: str,
                                        blocked: bool) -> None:
    assert fault_filters.fault_blocks(cls, cleared, 3600, now=now) is blocked


def test_fault_blocks_refuses_a_bad_window_or_time() -> None:
    with pytest.raises(AnsibleFilterError, match="0 seconds or more"):
        fault_filters.fault_blocks("RestartNPU", "2026-12-06T09:00:00Z", -1)
    with pytest.raises(AnsibleFilterError, match="not a UTC time"):
        fault_filters.fault_blocks("RestartNPU", "yesterday", 60)


def test_fault_refusals_word_the_code_class_and_fix() -> None:
    record = fault_codes.lifetime({}, [{"npu": 1, "chip": 0, "codes": [
        {"code": "A8028801", "class": "SeparateNPU"},
        {"code": "A4028801", "class": "NotHandleFault"}]}], "2026-12-06T09:00:00Z")
    found = fault_filters.fault_refusals(record, 3600, now="2026-12-06T09:05:00Z")
    assert [f["code"] for f in found] == ["A8028801"]
    assert found[0]["message"].startswith(
        "chip 1/0: fault code A8028801, class SeparateNPU (present since 2026-12-06T09:00:00Z); "
        "fix: Drain the host")


def test_restart_business_restarts_once_per_fault_within_the_rate_limit() -> None:
    # B4060006 is RestartBusiness in the vendor's table (no real sample shows it: not simulated).
    faults = fault_codes.lifetime({}, [{"npu": 0, "chip": 0, "codes": [
        {"code": "B4060006", "class": fault_codes.classify("B4060006", TABLE)}]}],
        "2026-12-06T09:00:00Z")
    plan = fault_codes.restart_plan(faults, {}, 1, 3600, "2026-12-06T09:01:00Z")
    assert plan["restart"] and plan["due"] == ["0/0/B4060006@2026-12-06T09:00:00Z"]
    again = fault_codes.restart_plan(faults, plan["record"], 1, 3600, "2026-12-06T09:02:00Z")
    assert not again["restart"] and not again["limited"]
    assert again["record"] == plan["record"]
    other = fault_codes.lifetime(faults, [{"npu": 0, "chip": 0, "codes": [
        {"code": "B4060006", "class": "RestartBusiness"}]}, {"npu": 1, "chip": 0, "codes": [
        {"code": "B4060007", "class": "RestartBusiness"}]}], "2026-12-06T09:03:00Z")
    limited = fault_codes.restart_plan(other, plan["record"], 1, 3600, "2026-12-06T09:04:00Z")
    assert limited["limited"] and not limited["restart"]
    later = fault_codes.restart_plan(other, plan["record"], 1, 3600, "2026-12-06T10:02:00Z")
    assert later["restart"] and later["due"] == ["1/0/B4060007@2026-12-06T09:03:00Z"]


def test_the_sim_injects_only_codes_a_real_sample_shows() -> None:
    import json

    from ascend_sim.__main__ import CORPUS_CHIP_CODES

    shown: set[str] = set()
    for reading in (CORPUS / "faults").glob("*.expected.json"):
        shown |= {f["code"] for f in json.loads(reading.read_text())["faults"]
                  if f["rule"] == "vendor-chip"}
    assert set(CORPUS_CHIP_CODES) == shown


def test_the_metrics_writer_labels_each_code_with_its_class() -> None:
    from ansible_collections.ascend_serve.fleet.plugins.module_utils import npu_metrics

    info = (CORPUS / "npu-smi" / "a2-910b4-25.0.rc1.1-8card.txt").read_text()
    raw_alarm = (CORPUS / "faults" / "npu-smi-t-health-alarm-3codes-mindcluster-fixture.txt"
                 ).read_text().split("\n", 1)[1]
    calls: list[list[str]] = []

    def runner(argv: list[str]) -> tuple[int, str, str]:
        calls.append(argv)
        if argv[1:] == ["info"]:
            return 0, info, ""
        if argv[1:4] == ["info", "-t", "health"]:
            return 0, raw_alarm if argv[5] == "0" else OK, ""
        return 1, "", "not answered here"

    text = npu_metrics.render(npu_metrics.read_node("npu-smi", "/nonexistent", runner, TABLE))
    assert sum(1 for c in calls if c[1:4] == ["info", "-t", "health"]) == 8
    fault_lines = [line for line in text.splitlines()
                   if line.startswith(npu_metrics.FAULT_CLASS_METRIC + "{")]
    assert len(fault_lines) == 3
    assert 'class="RestartNPU"' in fault_lines[0] and 'code="8C03A000"' in fault_lines[0]
    assert 'id="0"' in fault_lines[0]
    codes = [line for line in text.splitlines() if line.startswith("npu_chip_info_error_code{")]
    assert codes[0].endswith(f" {int('8C03A000', 16)}") and codes[1].endswith(" 0")
