"""The NPU metrics writer (``ascend_serve.node.npu_metrics``) and a real Prometheus scraping it.

- Against the simulator's own ``npu-smi`` and ``hccn_tool`` (``ascend_sim.devtools``, run on
  this machine with a scratch node: no container): A2, A3 and 310P nodes, a Critical chip, a
  missing npu-smi; run from the layout the ``npu_metrics`` role installs, on the system Python.
- Against real outputs (``tests/data/corpus/npu-smi``, ``hccn_tool``) through stand-in tools
  that print a sample: the values equal the samples' readings.
- Against npu-exporter (``tests/data/corpus/npu-exporter``): every family written has a family
  of that name, TYPE and label names there; the corpus readings equal what prometheus_client's
  parser (from the vLLM environment bootstrap makes) reads; ``promtool check metrics`` lints it.
- For real (marker ``vllm``): the Debian node exporter serves the file through the link the role
  makes, Prometheus (Debian's) scrapes it and the tiny vLLM with the configuration and alert
  rules the monitoring playbook renders; both targets are up, the series are there, the
  Critical chip's alert is pending, and a healed chip shows after the next write.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from ansible_run import ansible_playbook
from corpus import reading
from paths import CORPUS, PLAYBOOKS, PLUGINS
from vllm_server import VllmServer, free_port, vllm_python

from ascend_sim import models

ROLE_FILES = PLUGINS / "module_utils"  # where the role copies the writer and readers from
EXPORTER_CORPUS = CORPUS / "npu-exporter"
SYSTEM_PYTHON = "/usr/bin/python3"  # the node's system Python, as the role's unit runs it
DRIVER = "24.1.rc2"
LABELS = ["container_name", "id", "model_name", "namespace", "pcie_bus_info", "pod_name",
          "vdie_id"]
VDIE = re.compile(r"^(?:[0-9A-F]{8}-){4}[0-9A-F]{8}$")
# prometheus_client's parser, run by the vLLM environment's Python (vLLM depends on it):
# families as {name: {"type", "labels" (per sample, in order), "samples": [[labels, value]]}}.
PARSE = """
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for fam in text_string_to_metric_families(sys.stdin.read()):
    out[fam.name] = {"type": fam.type, "help": fam.documentation,
                     "samples": [[s.labels, s.value, s.timestamp is not None]
                                 for s in fam.samples]}
print(json.dumps(out))
"""


def parse(text: str) -> dict[str, Any]:
    """Prometheus text -> families, read by prometheus_client (the doc's ``...`` lines are
    elisions, not metrics)."""
    body = "\n".join(line for line in text.splitlines() if line.strip() != "...") + "\n"
    proc = subprocess.run([str(vllm_python()), "-c", PARSE], input=body, capture_output=True,
                          text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    families: dict[str, Any] = json.loads(proc.stdout)
    return families


def series(text: str, name: str) -> dict[str, float]:
    """One family's values by the ``id`` label; {} where the family is not written."""
    family = parse(text).get(name, {"samples": []})
    return {s[0]["id"]: s[1] for s in family["samples"]}


# --- the simulator's tools on this machine ------------------------------------------------------


@dataclass
class Sim:
    root: Path
    node_dir: Path
    bin: Path

    @property
    def npu_smi(self) -> Path:
        return self.bin / "npu-smi"

    @property
    def hccn_tool(self) -> Path:
        return self.bin / "hccn_tool"

    def create(self, model: str, npus: int | None = None, *health: str) -> models.Node:
        args = ["node", "create", str(self.node_dir), "--model", model]
        args += ["--npus", str(npus)] if npus else []
        for item in health:
            args += ["--health", item]
        subprocess.run([sys.executable, "-m", "ascend_sim", *args], check=True,
                       capture_output=True)
        return models.Node.load(self.node_dir / "node.json")

    def health(self, npu: int, state: str) -> None:
        subprocess.run([sys.executable, "-m", "ascend_sim", "health", str(self.node_dir),
                        str(npu), state], check=True, capture_output=True)


@pytest.fixture
def sim(tmp_path: Path) -> Sim:
    """A scratch node (driver installed) and launchers of the simulator's npu-smi and hccn_tool,
    as its driver installer writes them on a node, pointed at that node; no network changes."""
    root, node_dir, bindir = tmp_path / "root", tmp_path / "node", tmp_path / "bin"
    info = root / "usr/local/Ascend/driver/version.info"
    info.parent.mkdir(parents=True)
    info.write_text(f"Version={DRIVER}\npackage_version={DRIVER}\n")
    bindir.mkdir()
    for name, module in (("npu-smi", "npu_smi"), ("hccn_tool", "hccn_tool")):
        launcher = bindir / name
        launcher.write_text(
            f"#!{sys.executable}\nimport os, sys\n"
            f"os.environ.update(ASCEND_SIM_ROOT={str(root)!r}, "
            f"ASCEND_SIM_NODE={str(node_dir / 'node.json')!r}, ASCEND_SIM_NET='off')\n"
            f"from ascend_sim.devtools.{module} import main\nsys.exit(main())\n")
        launcher.chmod(0o755)
    return Sim(root, node_dir, bindir)


def deploy_writer(target: Path) -> Path:
    """The writer as the role installs it: its files/ (links resolved) under ascend_serve/node/
    with empty package markers; returns the directory to put on PYTHONPATH."""
    package = target / "ascend_serve" / "node"
    package.mkdir(parents=True)
    for name in ("npu_metrics.py", "npu_smi.py", "hccn.py"):
        shutil.copyfile(ROLE_FILES / name, package / name)
    (target / "ascend_serve" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    return target


def run_writer(pythonpath: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python3 -s -m ascend_serve.node.npu_metrics`` on the system Python, as the unit runs it."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(pythonpath)}
    return subprocess.run([SYSTEM_PYTHON, "-s", "-m", "ascend_serve.node.npu_metrics", *args],
                          env=env, capture_output=True, text=True, check=False, timeout=300)


@pytest.fixture
def writer(tmp_path: Path) -> Path:
    return deploy_writer(tmp_path / "lib")


def write_metrics(writer: Path, sim: Sim, out: Path) -> str:
    return write_with(writer, out, sim.npu_smi, sim.hccn_tool)


def write_with(writer: Path, out: Path, npu_smi: Path, hccn_tool: Path) -> str:
    proc = run_writer(writer, "--output", str(out), "--npu-smi", str(npu_smi),
                      "--hccn-tool", str(hccn_tool))
    assert proc.returncode == 0, proc.stderr
    return out.read_text()


# --- simulated nodes ----------------------------------------------------------------------------


def test_a2_node_with_a_critical_chip(sim: Sim, writer: Path, tmp_path: Path) -> None:
    node = sim.create("atlas800-a2", None, "3=Critical")
    out = tmp_path / "out" / "ascend_npu.prom"
    out.parent.mkdir()

    text = write_metrics(writer, sim, out)

    families = parse(text)
    assert families["ascend_serve_npu_metrics_collect_success"]["samples"][0][1] == 1
    assert families["machine_npu_nums"]["samples"][0][1] == 8
    ids = [str(c.npu) for c in node.chips]
    assert series(text, "npu_chip_info_health_status") == {
        i: (0.0 if i == "3" else 1.0) for i in ids}
    # The simulator takes an unhealthy chip's device port down (hccn_tool -link -g: DOWN); a
    # device without an address says net health Init, which npu-exporter counts as healthy.
    assert series(text, "npu_chip_info_link_status") == {i: (0.0 if i == "3" else 1.0)
                                                         for i in ids}
    assert series(text, "npu_chip_info_network_status") == dict.fromkeys(ids, 1.0)
    by_id = {str(c.npu): c for c in node.chips}
    assert series(text, "npu_chip_info_hbm_used_memory") == {
        i: float(c.hbm_used_mb) for i, c in by_id.items()}
    assert series(text, "npu_chip_info_hbm_total_memory") == {
        i: float(c.hbm_total_mb) for i, c in by_id.items()}
    assert series(text, "npu_chip_info_temperature") == {
        i: float(c.temp_c) for i, c in by_id.items()}
    assert series(text, "npu_chip_info_power") == {
        i: float(c.power_w) for i, c in by_id.items() if c.power_w is not None}
    assert "npu_chip_info_total_memory" not in families  # A2: DDR 0 / 0 in npu-smi
    for sample in families["npu_chip_info_health_status"]["samples"]:
        labels = sample[0]
        assert sorted(labels) == LABELS
        assert labels["model_name"] == f"{node.chips[0].name}-Ascend-V1"
        assert VDIE.match(labels["vdie_id"]), labels
        assert labels["pcie_bus_info"] == by_id[labels["id"]].bus_id
        assert labels["namespace"] == labels["pod_name"] == labels["container_name"] == ""
    names = families["npu_chip_info_name"]["samples"]
    assert {s[0]["name"] for s in names} == {f"{node.chips[0].name}-Ascend-V1"}
    assert len({s[0]["vdie_id"] for s in names}) == 8  # one die id per chip
    assert not any(s[2] for f in families.values() for s in f["samples"])  # no timestamps


def test_a3_node_reports_chips_by_phy_id(sim: Sim, writer: Path, tmp_path: Path) -> None:
    node = sim.create("atlas800-a3", 2)
    text = write_metrics(writer, sim, tmp_path / "ascend_npu.prom")

    assert parse(text)["machine_npu_nums"]["samples"][0][1] == 4
    health = series(text, "npu_chip_info_health_status")
    assert health == {str(c.phy_id): 1.0 for c in node.chips}
    # npu-smi prints "-" for the power of chip 1 of each NPU: not reported.
    assert set(series(text, "npu_chip_info_power")) == {str(c.phy_id) for c in node.chips
                                                        if c.chip == 0}
    assert set(series(text, "npu_chip_info_link_status")) == set(health)
    models_by_id = {s[0]["id"]: s[0]["model_name"]
                    for s in parse(text)["npu_chip_info_health_status"]["samples"]}
    assert set(models_by_id.values()) == {"Ascend910-Ascend-V1"}


def test_310p_node_has_no_hbm_and_no_device_network(sim: Sim, writer: Path,
                                                    tmp_path: Path) -> None:
    node = sim.create("atlas300i-duo")
    text = write_metrics(writer, sim, tmp_path / "ascend_npu.prom")

    families = parse(text)
    assert not {"npu_chip_info_hbm_used_memory", "npu_chip_info_link_status",
                "npu_chip_info_network_status", "npu_chip_info_power"} & set(families)
    assert series(text, "npu_chip_info_total_memory") == {
        str(c.npu): float(c.mem_total_mb) for c in node.chips}


def test_npu_smi_that_fails_is_reported_not_hidden(sim: Sim, writer: Path,
                                                   tmp_path: Path) -> None:
    sim.create("atlas800-a2")
    (sim.root / "usr/local/Ascend/driver/version.info").unlink()  # npu-smi: dcmi init fails
    out = tmp_path / "ascend_npu.prom"

    proc = run_writer(writer, "--output", str(out), "--npu-smi", str(sim.npu_smi))

    assert proc.returncode == 1
    assert "-8005" in proc.stderr
    text = out.read_text()
    assert re.search(r"^# error: npu-smi info failed \(rc 1: .*-8005", text, re.M)
    assert set(parse(text)) == {"ascend_serve_npu_metrics_collect_success"}
    assert parse(text)["ascend_serve_npu_metrics_collect_success"]["samples"][0][1] == 0


def test_the_file_is_replaced_whole(sim: Sim, writer: Path, tmp_path: Path) -> None:
    sim.create("atlas800-a2", 2)
    out = tmp_path / "out" / "ascend_npu.prom"
    out.parent.mkdir()
    write_metrics(writer, sim, out)
    before = out.stat().st_ino
    sim.health(1, "Alarm")

    text = write_metrics(writer, sim, out)

    assert out.stat().st_ino != before  # a new file renamed over the old one
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert [p.name for p in out.parent.iterdir()] == ["ascend_npu.prom"]  # no temporary left
    assert series(text, "npu_chip_info_health_status") == {"0": 1.0, "1": 0.0}


@pytest.mark.parametrize("args", [["--output", "/tmp/x.txt"], ["--bogus"]])
def test_bad_arguments_exit_2(writer: Path, args: list[str]) -> None:
    proc = run_writer(writer, *args)

    assert proc.returncode == 2
    assert "usage" in proc.stderr


# --- real outputs -------------------------------------------------------------------------------


def fake_tool(path: Path, answers: dict[str, Path]) -> Path:
    """A stand-in printing a corpus sample for each argument pattern (a shell ``case`` pattern,
    quoted where it has spaces), exit 1 for anything else."""
    cases = "".join(f'  {pattern}) cat "{sample}" ;;\n' for pattern, sample in answers.items())
    path.write_text(f'#!/bin/sh\ncase "$*" in\n{cases}  *) echo "usage" >&2; exit 1 ;;\nesac\n')
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("sample", ["a2-910b4-25.0.rc1.1-8card", "a3-25.0.rc1-16chip",
                                    "910a-23.0.rc3-warning-1card", "310p3-duo-24.1.0.1-8chip"])
def test_values_equal_the_corpus_readings(writer: Path, tmp_path: Path, sample: str) -> None:
    npu_dir, hccn_dir = CORPUS / "npu-smi", CORPUS / "hccn_tool"
    npu_smi = fake_tool(tmp_path / "npu-smi", {
        '"info"': npu_dir / f"{sample}.txt",
        '"info -t board -i "*': npu_dir / "910-info-c-board-doc-redacted.txt"})
    hccn_tool = fake_tool(tmp_path / "hccn_tool", {
        '"-i "*" -link -g"': hccn_dir / "link-g-loop-elided-a2-mindie.txt",
        '"-i "*" -net_health -g"': hccn_dir / "net-health-fault-doc.txt"})
    chips = reading(npu_dir / f"{sample}.txt")["chips"]
    ids = [str(c["phy_id"] if c["phy_id"] is not None else c["npu"]) for c in chips]

    text = write_with(writer, tmp_path / "ascend_npu.prom", npu_smi, hccn_tool)

    assert series(text, "npu_chip_info_health_status") == {
        i: (1.0 if c["health"] == "OK" else 0.0) for i, c in zip(ids, chips, strict=True)}
    assert series(text, "npu_chip_info_temperature") == {
        i: float(c["temp_c"]) for i, c in zip(ids, chips, strict=True)}
    assert series(text, "npu_chip_info_power") == {
        i: float(c["power_w"]) for i, c in zip(ids, chips, strict=True)
        if c["power_w"] is not None}
    families = parse(text)
    if any(c["hbm_total_mb"] for c in chips):
        assert series(text, "npu_chip_info_hbm_used_memory") == {
            i: float(c["hbm_used_mb"]) for i, c in zip(ids, chips, strict=True)}
    else:
        assert "npu_chip_info_hbm_used_memory" not in families
    if chips[0]["name"].startswith("310"):
        assert "npu_chip_info_link_status" not in families
    else:  # link-g sample: UP; net-health-fault-doc: Fault
        assert series(text, "npu_chip_info_link_status") == dict.fromkeys(ids, 1.0)
        assert series(text, "npu_chip_info_network_status") == dict.fromkeys(ids, 0.0)
    # The board page of the vendor's doc: Chip Name "xxx" (redacted there), Type Ascend, V1;
    # VDie ID "42C711D4 20B03704 ..." becomes npu-exporter's dash-joined form.
    labels = families["npu_chip_info_health_status"]["samples"][0][0]
    assert labels["model_name"] == "xxx-Ascend-V1"
    assert labels["vdie_id"] == "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003"
    assert [s[0]["pcie_bus_info"] for s in families["npu_chip_info_health_status"]["samples"]
            ] == [c["bus_id"] for c in chips]


# --- npu-exporter's names -----------------------------------------------------------------------


def exporter_samples() -> list[Path]:
    return sorted(p for p in EXPORTER_CORPUS.glob("*.txt"))


@pytest.mark.parametrize("sample", exporter_samples(), ids=lambda p: p.stem)
def test_corpus_readings_are_what_the_parser_reads(sample: Path) -> None:
    families = parse(sample.read_text())
    expected = reading(sample)["families"]
    assert set(families) == set(expected)
    for name, family in families.items():
        want = expected[name]
        assert family["type"] == want["type"], name
        assert family["help"] == want["help"], name
        assert [list(s[0]) for s in family["samples"]] == [want["labels"]] * want["samples"]
        assert [s[1] for s in family["samples"]] == want["values"], name
        assert {s[2] for s in family["samples"]} == {want["timestamped"]}, name


def test_every_family_written_is_npu_exporters(sim: Sim, writer: Path, tmp_path: Path) -> None:
    """Name, TYPE and label names of each family equal npu-exporter's (its own prefix aside)."""
    corpus: dict[str, Any] = {}
    for sample in exporter_samples():
        corpus.update(reading(sample)["families"])
    written: dict[str, Any] = {}
    for model in ("atlas800-a2", "atlas800-a3", "atlas300i-duo"):
        sim.create(model, 2)
        written.update(parse(write_metrics(writer, sim, tmp_path / f"{model}.prom")))

    ours = {n for n in written if n.startswith("ascend_serve_")}
    assert ours == {"ascend_serve_npu_metrics_collect_success"}
    assert len(written) - len(ours) == 12
    for name in sorted(set(written) - ours):
        assert name in corpus, f"{name} is not an npu-exporter metric"
        assert written[name]["type"] == corpus[name]["type"], name
        label_sets = {tuple(s[0]) for s in written[name]["samples"]}
        assert label_sets == {tuple(corpus[name]["labels"])}, name


def test_promtool_lints_the_file(sim: Sim, writer: Path, tmp_path: Path) -> None:
    sim.create("atlas800-a3", 2, "1=Warning")
    text = write_metrics(writer, sim, tmp_path / "ascend_npu.prom")
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("no promtool: run scripts/bootstrap.sh (Debian package prometheus)")

    proc = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                          text=True, check=False, timeout=60)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout + proc.stderr == ""


# --- a real Prometheus --------------------------------------------------------------------------


def required(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        pytest.fail(f"no {tool}: run scripts/bootstrap.sh (Debian packages prometheus, "
                    "prometheus-node-exporter)", pytrace=False)
    return found


@dataclass
class Prometheus:
    url: str

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        answer.raise_for_status()
        result: list[dict[str, Any]] = answer.json()["data"]["result"]
        return result

    def wait(self, expr: str, until: Any, what: str, limit_s: float = 90.0) -> list[Any]:
        """Ask again (each scrape is a second apart) until ``until(result)``; fail naming what
        was awaited and the last answer after limit_s (a guard, not a measurement)."""
        deadline = time.monotonic() + limit_s
        while True:
            result = self.query(expr)
            if until(result):
                return result
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: {expr} gave {result}")
            time.sleep(0.5)


@pytest.fixture
def process_group(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts; stopped (and reaped) after it."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in reversed(procs):
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)


def start(procs: list[subprocess.Popen[bytes]], log: Path, *argv: str) -> None:
    with log.open("wb") as out:
        procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL))


@pytest.mark.vllm
def test_prometheus_scrapes_the_node_and_vllm(
        sim: Sim, writer: Path, tmp_path: Path, vllm_deepseek_v3: VllmServer,
        process_group: list[subprocess.Popen[bytes]]) -> None:
    node_exporter, prometheus = required("prometheus-node-exporter"), required("prometheus")
    server = vllm_deepseek_v3
    sim.create("atlas800-a2", None, "3=Critical")
    # As the role lays it out: the writer's own directory, and a link in the textfile directory.
    state_dir, textfile_dir = tmp_path / "state", tmp_path / "textfile"
    state_dir.mkdir()
    textfile_dir.mkdir()
    out = state_dir / "ascend_npu.prom"
    link = textfile_dir / "ascend_npu.prom"
    link.symlink_to(out)
    os.utime(link, (0, 0), follow_symlinks=False)  # the link's own mtime: 1970
    write_metrics(writer, sim, out)

    exporter_port, prom_port = free_port(), free_port()
    start(process_group, tmp_path / "node-exporter.log", node_exporter,
          f"--web.listen-address=127.0.0.1:{exporter_port}", "--collector.disable-defaults",
          "--collector.textfile", f"--collector.textfile.directory={textfile_dir}")

    # The playbook's own files for one host on this machine: its node exporter and the vLLM.
    vllm_port = int(server.url.rsplit(":", 1)[1])
    key = tmp_path / "vllm.key"
    key.write_text(f"{server.api_key}\n")
    key.chmod(0o600)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"ascend_nodes": {"hosts": {
        "sim-node": {"ansible_host": "127.0.0.1", "npu_metrics_vllm_port": vllm_port,
                     "npu_metrics_node_exporter_port": exporter_port}}}}}}))
    config_dir = tmp_path / "prometheus"
    proc = ansible_playbook(
        "-i", str(inventory), str(PLAYBOOKS / "monitoring.yml"), "--tags", "prometheus",
        "-e", f"monitoring_prometheus_dir={config_dir}",
        "-e", f"npu_metrics_vllm_credentials_file={key}",
        "-e", "npu_metrics_scrape_interval=1s", "-e", "npu_metrics_evaluation_interval=1s",
        timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    start(process_group, tmp_path / "prometheus.log", prometheus,
          f"--config.file={config_dir / 'prometheus.yml'}",
          f"--storage.tsdb.path={tmp_path / 'tsdb'}",
          f"--web.listen-address=127.0.0.1:{prom_port}")
    prom = Prometheus(f"http://127.0.0.1:{prom_port}")
    for _ in range(120):  # Prometheus opens its port once its storage is ready
        try:
            httpx.get(f"{prom.url}/-/ready", timeout=2).raise_for_status()
            break
        except httpx.HTTPError:
            time.sleep(0.5)

    up = prom.wait("up", lambda r: len(r) == 2 and all(s["value"][1] == "1" for s in r),
                   "both targets up")
    assert {(s["metric"]["job"], s["metric"]["node"]) for s in up} == {
        ("ascend-node", "sim-node"), ("vllm", "sim-node")}

    health = prom.wait("npu_chip_info_health_status", lambda r: len(r) == 8, "8 chips")
    assert {s["metric"]["id"]: s["value"][1] for s in health} == {
        str(n): ("0" if n == 3 else "1") for n in range(8)}
    assert {s["metric"]["model_name"] for s in health} == {"910B1-Ascend-V1"}
    for name in ("npu_chip_info_hbm_used_memory", "npu_chip_info_link_status",
                 "npu_chip_info_network_status", "npu_chip_info_temperature",
                 "npu_chip_info_power", "npu_chip_info_name"):
        assert len(prom.query(name)) == 8, name
    assert prom.query("machine_npu_nums")[0]["value"][1] == "8"
    assert prom.query("node_textfile_scrape_error")[0]["value"][1] == "0"
    # The stale alert's selector finds the file the node exporter read through the link, with
    # the mtime of the file the writer replaced, not the link's.
    mtime = prom.query('node_textfile_mtime_seconds{file=~"(.*/)?ascend_npu\\\\.prom"}')
    assert [s["metric"]["file"] for s in mtime] == [str(link)]
    assert float(mtime[0]["value"][1]) >= int(out.stat().st_mtime) - 1
    ttft = prom.query('vllm:time_to_first_token_seconds_count{job="vllm"}')
    assert [s["metric"]["model_name"] for s in ttft] == [server.served_name]

    # The rendered rules are loaded: the Critical chip's alerts (its health, and its device port
    # that the simulator takes down with it) wait out their `for`; nothing else is pending.
    expected = {("AscendNpuChipUnhealthy", "3", "pending"), ("AscendNpuLinkDown", "3", "pending")}
    alerts = prom.wait("ALERTS", lambda r: len(r) >= 2, "the unhealthy chip's alerts")
    assert {(s["metric"]["alertname"], s["metric"]["id"], s["metric"]["alertstate"])
            for s in alerts} == expected

    # The chip heals; the next write replaces the file behind the link, and Prometheus sees it.
    sim.health(3, "OK")
    write_metrics(writer, sim, out)
    prom.wait('npu_chip_info_health_status{id="3"}', lambda r: r and r[0]["value"][1] == "1",
              "chip 3 healthy after the rewrite")
    prom.wait("ALERTS", lambda r: r == [], "the alerts gone")
    assert link.is_symlink()
