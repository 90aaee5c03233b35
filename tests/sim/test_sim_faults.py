"""The simulator's fault injection (issue #32) prints only what the corpus shows: an HCCL socket
timeout in the serving unit's log in the format of the real sample
(``tests/data/corpus/faults/hccl-ei0006-get-socket-timeout-2node-issue5461.log``), classified as
that sample is; a RestartBusiness-class chip code in the ``-t health`` format of the corpus's
MindCluster fixture; and the Kubernetes API stand-in's node taints as ``kubectl taint`` leaves
them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from paths import CORPUS, DATA, ROOT

from ascend_serve.doctor.faults.classifier import classifier
from ascend_sim import models
from ascend_sim.__main__ import VENDOR_TABLE_CHIP_CODES
from ascend_sim.__main__ import main as sim_main
from ascend_sim.devtools import npu_smi
from ascend_sim.kubeapi import merge

HCCL_SAMPLE = CORPUS / "faults" / "hccl-ei0006-get-socket-timeout-2node-issue5461"
# The shape of the sample's first line: PID, CANN's timestamp, the error name and its code.
HCCL_LINE = re.compile(r"^\[PID: \d+\] \d{4}-\d\d-\d\d-\d\d:\d\d:\d\d\.\d{3}\.\d{3} "
                       r"Get_Socket_Timeout\(EI0006\): Getting socket times out\.")
STANDIN = ROOT / "tests" / "data" / "vllm-standin"


def _found(text: str) -> list[dict[str, str]]:
    return [{"code": f.code, "rule": f.rule, "class": f.fault_class}
            for f in classifier().scan(text).faults]


def test_the_hccl_timeout_is_the_corpus_format_and_fails_the_unit(tmp_path: Path) -> None:
    node_dir = tmp_path / "node"
    node_dir.mkdir()
    models.make_node("atlas800-a2", 2).save(node_dir / "node.json")
    assert sim_main(["unit-log", str(node_dir), "hccl-timeout", "--pid", "4242"]) == 0
    lines = models.Node.load(node_dir / "node.json").faults["unit_log"]

    sample = (HCCL_SAMPLE.with_suffix(".log")).read_text().splitlines()
    assert HCCL_LINE.match(sample[0]) and HCCL_LINE.match(lines[0]), lines
    assert lines[0].startswith("[PID: 4242] ")
    assert lines[1] in sample  # the sample's own TraceBack header line
    expected = json.loads(HCCL_SAMPLE.with_suffix(".expected.json").read_text())["faults"]
    assert _found("\n".join(lines)) == expected == _found("\n".join(sample))

    # The stand-in server, as the unit runs it, prints the lines and exits 1 before serving.
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "deepseek_v3"}')
    proc = subprocess.run([sys.executable, str(STANDIN), "serve", str(model),
                           "--served-model-name", "x", "--port", "1"],
                          env={**os.environ, "ASCEND_SIM_NODE": str(node_dir / "node.json")},
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == lines

    assert sim_main(["unit-log", str(node_dir), "clear"]) == 0
    assert "unit_log" not in models.Node.load(node_dir / "node.json").faults


def test_a_restart_business_code_in_the_health_format(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    table = json.loads((DATA / "faults" / "vendor_codes.json").read_text())["chip"]["codes"]
    assert [table[c] for c in VENDOR_TABLE_CHIP_CODES] == ["RestartBusiness"]
    node_dir = tmp_path / "node"
    node_dir.mkdir()
    models.make_node("atlas800-a2", 2).save(node_dir / "node.json")
    assert sim_main(["fault-code", str(node_dir), "1", VENDOR_TABLE_CHIP_CODES[0]]) == 0
    with pytest.raises(SystemExit, match="no real sample shows 80E01802"):
        sim_main(["fault-code", str(node_dir), "0", "80E01802"])

    root = tmp_path / "root"
    (root / "usr/local/Ascend/driver").mkdir(parents=True)
    (root / "usr/local/Ascend/driver/version.info").write_text("Version=25.5.0\n")
    monkeypatch.setenv("ASCEND_SIM_ROOT", str(root))
    monkeypatch.setenv("ASCEND_SIM_NODE", str(node_dir / "node.json"))
    assert npu_smi.main(["info", "-t", "health", "-i", "1", "-c", "0"]) == 0
    page = capsys.readouterr().out
    fixture = (CORPUS / "faults" / "npu-smi-t-health-alarm-3codes-mindcluster-fixture.txt")
    keys = [line.split(":", 1)[0].strip() for line in page.splitlines() if ":" in line]
    shown = [line.split(":", 1)[0].strip() for line in fixture.read_text().splitlines()
             if ":" in line and line.split(":", 1)[0].strip()]
    assert set(keys) <= set(shown), (keys, shown)
    assert re.search(r"Health Status\s*:\s*Alarm", page)
    assert re.search(r"Error Code\s*:\s*80E01801\s*$", page, re.M), page
    assert [(f.code, f.fault_class) for f in classifier().scan(page).faults
            if f.rule == "vendor-chip"] == [("80E01801", "RestartBusiness")]


def test_the_api_stand_in_patches_taints_as_kubectl_sends_them() -> None:
    node = {"metadata": {"name": "n"}, "spec": {"podCIDR": "10.0.0.0/24"}}
    taint = {"key": "ascend-serve/npu-fault", "value": "SeparateNPU", "effect": "NoSchedule"}
    tainted = merge(node, {"spec": {"taints": [taint]}})
    assert tainted["spec"] == {"podCIDR": "10.0.0.0/24", "taints": [taint]}
    # A list has no merge key: the patch replaces it; null removes it.
    assert merge(tainted, {"spec": {"taints": [dict(taint, value="RestartNPU")]}})["spec"][
        "taints"] == [dict(taint, value="RestartNPU")]
    assert merge(tainted, {"spec": {"taints": None}})["spec"] == {"podCIDR": "10.0.0.0/24"}
