"""The Prometheus files the monitoring playbook renders for an inventory, checked by Debian's own
``promtool`` (package ``prometheus``, installed by scripts/bootstrap.sh): ``check config``,
``check rules`` and ``test rules`` with a firing and a not-firing case for every alert
(``alerts.test.yml``, next to this file).

The files are rendered once per session by ``ansible-playbook`` of
``ascend_serve.fleet.monitoring`` with the tag ``prometheus`` (only the controller's play runs;
no node is contacted) over a three-host inventory: a two-node profile (node01 its head, node02
its headless node, on IPv6 with ports of its own) and a one-node profile (node03).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_run import ansible_playbook
from paths import PLAYBOOKS

HERE = Path(__file__).resolve().parent
ALERTS = {"AscendNpuChipUnhealthy", "AscendNpuHbmNearFull", "AscendNpuLinkDown",
          "AscendNpuNetworkUnhealthy", "AscendNpuMetricsFailing", "AscendNpuMetricsStale",
          "AscendNodeExporterDown", "VllmDown", "VllmTtftP99OverSlo",
          # One per vendor fault class (data/faults/rules.yml, issue #32).
          *(f"AscendNpuFault{name}" for name in (
              "SeparateNPU", "PreSeparateNPU", "RestartNPU", "FreeRestartNPU", "RestartBusiness",
              "RestartRequest", "SubHealthFault", "NotHandleFault"))}
INVENTORY = {"all": {"children": {"ascend_nodes": {
    "children": {"pair": {
        "hosts": {
            "node01": {"ansible_host": "192.0.2.11"},
            "node02": {"ansible_host": "2001:db8::12", "npu_metrics_vllm_port": 8080,
                       "npu_metrics_node_exporter_port": 9200},
        },
        # vllm_service places the first host of its nodes group as the head.
        "vars": {"vllm_service_profile": "deepseek-r1-w8a8-2xa2",
                 "vllm_service_nodes_group": "pair"}}},
    "hosts": {"node03": {"ansible_host": "192.0.2.13",
                         "vllm_service_profile": "deepseek-r1-distill-qwen-7b"}},
}}}}


def promtool() -> str:
    """Debian's promtool; fails (never skips) where bootstrap has not installed it."""
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("no promtool: run scripts/bootstrap.sh (Debian package prometheus)",
                    pytrace=False)
    return found


def run_promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True,
                          check=False, timeout=120)


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """prometheus.yml and ascend-alerts.yml for INVENTORY, with a vLLM key file, rendered by the
    playbook with promtool as its validator."""
    root = tmp_path_factory.mktemp("prometheus-files")
    (root / "hosts.yml").write_text(yaml.safe_dump(INVENTORY))
    (root / "vllm.key").write_text("not-a-real-key\n")
    out = root / "prometheus"
    proc = ansible_playbook(
        "-i", str(root / "hosts.yml"), str(PLAYBOOKS / "monitoring.yml"), "--tags", "prometheus",
        "-e", f"monitoring_prometheus_dir={out}", "-e", f"npu_metrics_promtool={promtool()}",
        "-e", f"npu_metrics_vllm_credentials_file={root / 'vllm.key'}", timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return out


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def test_promtool_accepts_the_config_and_the_rules(rendered: Path) -> None:
    config = run_promtool("check", "config", str(rendered / "prometheus.yml"))
    assert config.returncode == 0, config.stdout + config.stderr
    assert "SUCCESS" in config.stdout + config.stderr
    rules = run_promtool("check", "rules", str(rendered / "ascend-alerts.yml"))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in rules.stdout + rules.stderr


def test_scrape_jobs_cover_every_host(rendered: Path) -> None:
    config = load(rendered / "prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"ascend-node", "vllm"}
    targets = {job: sorted((s["labels"]["node"], s["targets"], s["labels"])
                           for s in jobs[job]["static_configs"]) for job in jobs}
    assert targets["ascend-node"] == [
        ("node01", ["192.0.2.11:9100"], {"node": "node01", "role": "head"}),
        ("node02", ["[2001:db8::12]:9200"], {"node": "node02", "role": "headless"}),
        ("node03", ["192.0.2.13:9100"], {"node": "node03", "role": "single"})]
    # The headless node serves no API (vllm serve --headless): not a vLLM target.
    assert targets["vllm"] == [
        ("node01", ["192.0.2.11:8000"], {"node": "node01", "role": "head"}),
        ("node03", ["192.0.2.13:8000"], {"node": "node03", "role": "single"})]
    assert jobs["vllm"]["metrics_path"] == "/metrics"
    assert jobs["vllm"]["authorization"]["type"] == "Bearer"
    assert jobs["vllm"]["authorization"]["credentials_file"].endswith("/vllm.key")
    assert config["rule_files"] == [str(rendered / "ascend-alerts.yml")]


def test_every_alert_has_a_unit_test_that_passes(rendered: Path) -> None:
    """promtool's unit tests: each alert fires where it must and stays silent where it must
    not (exact labels and annotations compared)."""
    groups = load(rendered / "ascend-alerts.yml")["groups"]
    alerts = {rule["alert"] for group in groups for rule in group["rules"]}
    assert alerts == ALERTS
    tests = load(HERE / "alerts.test.yml")["tests"]
    firing = {case["alertname"] for test in tests for case in test["alert_rule_test"]
              if case["exp_alerts"]}
    silent = {case["alertname"] for test in tests for case in test["alert_rule_test"]
              if not case["exp_alerts"]}
    # A not-firing case is either an empty exp_alerts or a series of the test left out of a
    # firing case's expected alerts (the healthy chip, the fresh file, the fast server).
    assert firing == ALERTS
    assert {"AscendNpuHbmNearFull", "AscendNpuLinkDown", "VllmDown",
            "VllmTtftP99OverSlo"} <= silent
    # VllmDown: a head down fires, a headless node's failed scrape never does.
    headless = [case for test in tests for case in test["alert_rule_test"]
                if case["alertname"] == "VllmDown" and not case["exp_alerts"]
                and any('role="headless"' in series["series"] and "job=\"vllm\"" in series["series"]
                        for series in test["input_series"])]
    assert headless

    shutil.copy(HERE / "alerts.test.yml", rendered / "alerts.test.yml")
    proc = run_promtool("test", "rules", "alerts.test.yml", cwd=rendered)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_a_wrong_threshold_fails_the_unit_tests(rendered: Path, tmp_path: Path) -> None:
    """The unit tests can fail: the same rules with another HBM threshold do not pass them."""
    rules = (rendered / "ascend-alerts.yml").read_text()
    assert "\n          > 97\n" in rules
    (tmp_path / "ascend-alerts.yml").write_text(rules.replace("\n          > 97\n",
                                                              "\n          > 98\n"))
    shutil.copy(HERE / "alerts.test.yml", tmp_path / "alerts.test.yml")
    proc = run_promtool("test", "rules", "alerts.test.yml", cwd=tmp_path)
    assert proc.returncode != 0
    assert "AscendNpuHbmNearFull" in proc.stdout + proc.stderr
