"""A real vllm-router (the router venv ``scripts/bootstrap.sh`` makes from the CPU set's router
lock) in front of given worker hosts, for the cheap tests that put stub replicas behind it
(tests/ is on pytest's pythonpath)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from vllm_server import free_port

from ascend_serve.serving.router import RouterSettings, WorkerHost, service_plan

ROUTER_VENV = Path(os.environ.get("ASCEND_ROUTER_VENV")
                   or Path(__file__).resolve().parents[1] / ".cache" / "router-venv")


@contextlib.contextmanager
def running_router(tmp_path: Path, hosts: Sequence[WorkerHost]) -> Iterator[str]:
    """vllm-router (round robin) over ``hosts``, started with the command line the router role
    renders (``service_plan``); yields its URL once it serves, stops it afterwards."""
    exe = ROUTER_VENV / "bin" / "vllm-router"
    if not exe.is_file():
        pytest.fail(f"no vllm-router in {ROUTER_VENV}: scripts/bootstrap.sh makes it",
                    pytrace=False)
    port = free_port()
    settings = RouterSettings(port=port, prometheus_port=free_port(), policy="round_robin")
    plan = service_plan("local", "regular", str(exe), settings, hosts=list(hosts))
    log_path = tmp_path / "router.log"
    with log_path.open("wb") as log:
        router = subprocess.Popen([*plan.argv, *plan.worker_args], stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                assert router.poll() is None, log_path.read_text()[-3000:]
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/v1/models", timeout=2, trust_env=False).status_code == 200:
                        break
                assert time.monotonic() < deadline, log_path.read_text()[-3000:]
                time.sleep(0.3)
            yield url
        finally:
            router.terminate()
            router.wait(timeout=30)
