"""``ascend-serve doctor explain FILE|-`` and host-mode doctor's classified faults.

The command reads the real samples of ``tests/data/corpus/faults/``; host mode reads the
recording of the simulated A2 node (``tests/data/doctor/a2-healthy.json``) with one collected
output replaced by a corpus sample, as the vendor's tool printed it.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
from paths import CORPUS
from typer.testing import CliRunner

from ascend_serve.cli.main import app
from ascend_serve.doctor.collected import Collected, redact_sections
from ascend_serve.doctor.diagnose import diagnose
from ascend_serve.doctor.findings import Context, HostReport
from ascend_serve.exitcodes import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK
from ascend_serve.stack.matrix import load_matrix

runner = CliRunner()
FAULTS = CORPUS / "faults"
HEALTH = FAULTS / "npu-smi-t-health-alarm-3codes-mindcluster-fixture.txt"
DOCTOR_DATA = Path(__file__).parents[1] / "data" / "doctor"


def _explain(*args: str, stdin: str | bytes | None = None) -> Any:
    return runner.invoke(app, ["doctor", "explain", *args], input=stdin)


# --- the command -----------------------------------------------------------------------------


def test_faults_found_exit_1_with_each_field() -> None:
    result = _explain(str(HEALTH))
    assert result.exit_code == EXIT_CHECK_FAILED, result.output
    for text in ("8C03A000", "RestartNPU", "8C084E00", "FreeRestartNPU", "A4025021",
                 "NotHandleFault", "worst class", "faultCode.json"):
        assert text in result.stdout, text


def test_json_gives_the_same_as_data() -> None:
    result = _explain(str(HEALTH), "--json")
    assert result.exit_code == EXIT_CHECK_FAILED
    data = json.loads(result.stdout)
    assert data["exit_code"] == 1 and data["worst_class"] == "RestartNPU"
    assert data["source"] == str(HEALTH) and data["empty"] is False and data["lines"] == 7
    assert [(f["code"], f["class"]) for f in data["faults"]] == [
        ("8C03A000", "RestartNPU"), ("8C084E00", "FreeRestartNPU"),
        ("A4025021", "NotHandleFault")]
    first = data["faults"][0]
    assert set(first) >= {"code", "component", "meaning", "class", "action", "fix", "source",
                          "cites", "lines", "evidence"}
    assert first["lines"] == [3] and "Error Code" in first["evidence"][0]


def test_a_project_fault_names_its_own_source() -> None:
    result = _explain(str(FAULTS / "npu-smi-8005-container-issue2698.txt"), "--json")
    data = json.loads(result.stdout)
    (fault,) = data["faults"]
    assert fault["source"] == "ascend-serve" and fault["class"] == "FreeNPU"
    assert any("issues/2698" in c for c in fault["cites"])


def test_standard_input() -> None:
    text = (FAULTS / "hccl-ei0006-allreduce-grpo-issue486.log").read_text(encoding="utf-8")
    result = _explain("-", "--json", stdin=text)
    assert result.exit_code == EXIT_CHECK_FAILED
    data = json.loads(result.stdout)
    assert data["source"] == "standard input"
    assert [f["code"] for f in data["faults"]] == ["EI0006"]


def test_no_known_fault_exits_0_and_says_so(tmp_path: Path) -> None:
    clean = CORPUS / "npu-smi" / "info-t-health-ok-doc.txt"
    result = _explain(str(clean))
    assert result.exit_code == EXIT_OK, result.output
    assert "no known fault" in result.stdout


def test_an_unknown_code_is_named_not_counted() -> None:
    result = _explain(str(FAULTS / "cann-eh9999-unclassified-issue4972.log"))
    assert result.exit_code == EXIT_OK
    assert "EH9999: a vendor error code this classifier does not know (line 1)" in result.stdout


def test_an_empty_log_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_text("\n\n", encoding="utf-8")
    result = _explain(str(empty))
    assert result.exit_code == EXIT_OK
    assert "is empty: nothing to explain" in result.stdout
    data = json.loads(_explain(str(empty), "--json").stdout)
    assert data["empty"] is True and data["faults"] == []


def _bad(result: Any, message: str) -> None:
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1


def test_a_missing_file(tmp_path: Path) -> None:
    _bad(_explain(str(tmp_path / "nope.log")), "nope.log: no such file")


def test_a_directory(tmp_path: Path) -> None:
    _bad(_explain(str(tmp_path)), "is a directory")


def test_binary_data(tmp_path: Path) -> None:
    blob = tmp_path / "core"
    blob.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)))
    _bad(_explain(str(blob)), "binary data, not a log")
    _bad(_explain("-", stdin=b"EI0006:\x00\x01"), "standard input: binary data")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_file(tmp_path: Path) -> None:
    locked = tmp_path / "locked.log"
    locked.write_text("EI0006: x\n", encoding="utf-8")
    locked.chmod(0)
    _bad(_explain(str(locked)), "permission denied")


def test_a_bad_knowledge_base(tmp_path: Path) -> None:
    not_kb = tmp_path / "kg-config.json"
    not_kb.write_text('{"something": 1}', encoding="utf-8")
    _bad(_explain(str(HEALTH), "--knowledge-base", str(not_kb)), "no knowledge-repository")
    _bad(_explain(str(HEALTH), "--knowledge-base", str(tmp_path / "none.json")),
         "--knowledge-base")


def test_a_knowledge_base_adds_its_cause(tmp_path: Path) -> None:
    kb = tmp_path / "kg-config.json"
    kb.write_text(json.dumps({"knowledge-repository": {
        "0x8C03A000": {"attribute": {"cause_en": "a cause from the site's knowledge base"}}}}),
        encoding="utf-8")
    data = json.loads(_explain(str(HEALTH), "--json", "--knowledge-base", str(kb)).stdout)
    assert "a cause from the site's knowledge base" in data["faults"][0]["meaning"]


def test_explain_is_a_subcommand_and_hosts_still_work() -> None:
    """The first word picks: ``explain`` runs the subcommand, a host name the examination."""
    result = runner.invoke(app, ["doctor", "--help"])
    assert result.exit_code == 0 and "doctor explain FILE|-" in result.stdout
    result = runner.invoke(app, ["doctor", "explain", "--help"])
    assert result.exit_code == 0 and "FILE|-" in result.stdout
    result = runner.invoke(app, ["doctor", "a..b"])
    assert result.exit_code == EXIT_BAD_INPUT


# --- host mode ---------------------------------------------------------------------------------


def _sections() -> dict[str, dict[str, Any]]:
    data: dict[str, dict[str, Any]] = json.loads(
        (DOCTOR_DATA / "a2-healthy.json").read_text(encoding="utf-8"))
    return copy.deepcopy(data)


def _diagnose(sections: dict[str, dict[str, Any]]) -> HostReport:
    findings = diagnose(Collected(host="node", sections=redact_sections(sections)),
                        Context(matrix=load_matrix()))
    return HostReport(host="node", collected=True, findings=findings)


def test_a_healthy_host_has_no_fault_class() -> None:
    report = _diagnose(_sections())
    assert report.worst_fault_class is None
    assert not [f for f in report.findings if f.id == "fault-code"]


def test_chip_codes_of_npu_smi_health_are_findings_with_their_class() -> None:
    sections = _sections()
    sections["npu-smi.health:0:0"] = {
        "argv": ["npu-smi", "info", "-t", "health", "-i", "0", "-c", "0"], "rc": 0,
        "out": HEALTH.read_text(encoding="utf-8"), "err": ""}
    report = _diagnose(sections)
    faults = {f.code: f for f in report.findings if f.id == "fault-code"}
    assert set(faults) == {"8C03A000", "8C084E00", "A4025021"}
    assert faults["8C03A000"].fault_class == "RestartNPU"
    assert faults["8C03A000"].severity == "error"
    assert faults["A4025021"].severity == "info"
    assert "npu-smi info -t health -i 0 -c 0" in faults["8C03A000"].evidence[0]
    assert report.worst_fault_class == "RestartNPU"
    assert report.model_dump()["worst_fault_class"] == "RestartNPU"


def test_a_plog_and_the_journal_are_read() -> None:
    sections = _sections()
    plog = (FAULTS / "hccl-plog-socket-establish-timeout-issue1955.log").read_text()
    sections["plog:/root/ascend/log/debug/plog/plog-1_2.log"] = {
        "path": "/root/ascend/log/debug/plog/plog-1_2.log", "text": plog}
    mooncake = (FAULTS / "mooncake-transfer-timeout-kvpool-issue10532.log").read_text()
    journal = sections["journal"]
    journal["out"] += "".join(f"2025-12-03T18:00:00+0000 node launch.sh[12081]: {line}\n"
                              for line in mooncake.splitlines())
    report = _diagnose(sections)
    by_rule = {f.title.split(":")[0]: f for f in report.findings if f.id == "fault-code"}
    assert by_rule["mooncake-transfer-timeout"].fault_class == "FixNetwork"
    assert "journalctl" in by_rule["mooncake-transfer-timeout"].evidence[0]
    # An HCCL timeout is the known problem hccl-timeout-in-log where the journal shows it; the
    # plog is read by the fault check alone, so there it is a classified fault of its own.
    assert by_rule["hccl-socket-timeout"].fault_class == "FixNetwork"
    assert report.worst_fault_class == "FixNetwork"
    assert "service-errors" not in {f.id for f in report.findings}


def test_a_known_problem_carries_its_fault_class() -> None:
    sections = _sections()
    line = (FAULTS / "hccl-ei0006-allreduce-grpo-issue486.log").read_text().splitlines()[-1]
    sections["journal"]["out"] += f"2025-12-03T18:00:00+0000 node launch.sh[12081]: {line}\n"
    report = _diagnose(sections)
    found = next(f for f in report.findings if f.id == "hccl-timeout-in-log")
    assert found.fault_class == "FixNetwork"
    assert not [f for f in report.findings if f.id == "fault-code"]


# --- the collector's new sections ---------------------------------------------------------------


def test_the_collector_asks_every_chip_for_its_health(tmp_path: Path) -> None:
    from ascend_serve.node.doctor_collect import Collector

    mapping = CORPUS / "npu-smi" / "a2-910b4-info-m-8card.txt"
    smi = tmp_path / "npu-smi"
    smi.write_text("#!/bin/sh\n"
                   f'if [ "$2" = "-m" ]; then cat {mapping}; exit 0; fi\n'
                   f'if [ "$5" = "0" ]; then cat {HEALTH}; exit 0; fi\n'
                   'echo "Health Status : OK"\n', encoding="utf-8")
    smi.chmod(0o755)
    collector = Collector(str(tmp_path / "facts"), 10, 30.0)
    collector.npu_health(str(smi))
    asked = sorted(n for n in collector.sections if n.startswith("npu-smi.health:"))
    # 8 NPUs with one AI chip each; the MCU rows (logic id "-") are not asked.
    assert asked == [f"npu-smi.health:{n}:0" for n in range(8)]
    assert collector.sections["npu-smi.health:0:0"]["argv"][1:] == [
        "info", "-t", "health", "-i", "0", "-c", "0"]
    assert "8C03A000" in collector.sections["npu-smi.health:0:0"]["out"]


def test_the_collector_keeps_the_error_lines_of_the_newest_plogs(tmp_path: Path) -> None:
    from ascend_serve.node.doctor_collect import PLOG_FILES, Collector

    folder = tmp_path / "debug" / "plog"
    folder.mkdir(parents=True)
    plog = (FAULTS / "hccl-plog-socket-establish-timeout-issue1955.log").read_text()
    for i in range(PLOG_FILES + 2):
        path = folder / f"plog-{100 + i}_2025.log"
        path.write_text("[INFO] HCCL(1,python3): fine\n" + plog, encoding="utf-8")
        os.utime(path, (1000 + i, 1000 + i))
    collector = Collector(str(tmp_path / "facts"), 10, 30.0)
    collector.plog({"ASCEND_PROCESS_LOG_PATH": str(tmp_path)})
    kept = sorted(n for n in collector.sections if n.startswith("plog:"))
    assert kept == sorted(f"plog:{folder}/plog-{100 + i}_2025.log"
                          for i in range(2, PLOG_FILES + 2))
    text = collector.sections[kept[0]]["text"]
    assert "[INFO]" not in text and text.count("[ERROR]") == 6
