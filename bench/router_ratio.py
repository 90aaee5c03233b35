#!/usr/bin/env python3
"""What the vLLM router costs and gives, on this machine: ``ascend-serve bench``'s load against
one tiny vLLM (CPU build) replica directly, through vllm-router with that one replica behind it,
and through the router with two replicas (issue #31, item 7). Measured, never asserted.

Two tiny servers (``bench/tiny_vllm.py``) and one ``vllm-router`` from the router venv that
``scripts/bootstrap.sh`` makes from the CPU set's router lock (``ASCEND_ROUTER_VENV``, default
``.cache/router-venv``), started with the command line ``ascend_serve.serving.router`` builds
(the router role's). The second replica joins through the router's ``POST /add_worker``
(``ascend_serve.serving.router_api``). Each figure is one run; the ratios are against the
direct run. On this 2-core machine the two replicas, the router and the client share two cores,
so two replicas cannot double the throughput: the ratios say what the router adds, and how the
CPU limits what a second replica gives.

    .venv/bin/python bench/router_ratio.py [--requests 48] [--concurrency 8] [--output-len 32]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
from tiny_vllm import REPO, free_port, tiny_server

from ascend_serve.bench.runner import BenchConfig, BenchResult, run_benchmark
from ascend_serve.serving.router import RouterSettings, Worker, router_argv
from ascend_serve.serving.router_api import RouterClient

ROUTER_VENV = Path(os.environ.get("ASCEND_ROUTER_VENV") or REPO / ".cache" / "router-venv")


def bench(url: str, model_dir: Path, args: argparse.Namespace) -> BenchResult:
    config = BenchConfig(url=url, tokenizer=str(model_dir), max_concurrency=args.concurrency,
                         num_prompts=args.requests, input_len=64, output_len=args.output_len,
                         warmup=2, percentiles=(50.0, 99.0))
    result = run_benchmark(config)
    if result.failed:
        raise SystemExit(f"{url}: {result.failed} requests failed: {result.first_errors()}")
    return result


def wait_router(url: str, workers: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            listed = httpx.get(url + "/list_workers", timeout=2).json().get("urls", [])
            if len(listed) == workers and httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    raise SystemExit(f"the router at {url} did not list {workers} worker(s) in {timeout:.0f} s")


def row(name: str, result: BenchResult, base: BenchResult) -> str:
    data, ref = result.to_json_dict(), base.to_json_dict()
    tput, ttft = data["output_throughput"], data["mean_ttft_ms"]
    return (f"{name:<28} {tput:>9.1f} {tput / ref['output_throughput']:>7.2f} "
            f"{ttft:>10.1f} {ttft / ref['mean_ttft_ms']:>7.2f} "
            f"{data['mean_e2el_ms']:>10.1f} {data['mean_e2el_ms'] / ref['mean_e2el_ms']:>7.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=48)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--output-len", type=int, default=32)
    args = parser.parse_args()
    executable = ROUTER_VENV / "bin" / "vllm-router"
    if not executable.is_file():
        raise SystemExit(f"no vllm-router at {executable}: run scripts/bootstrap.sh")
    with ExitStack() as stack:
        a = stack.enter_context(tiny_server(name="replica-a"))
        b = stack.enter_context(tiny_server(name="replica-b"))
        port = free_port()
        settings = RouterSettings(port=port, prometheus_port=free_port(), policy="round_robin")
        argv = router_argv(str(executable), [Worker("127.0.0.1", int(a.url.rsplit(":", 1)[1]))],
                           settings)
        log = (REPO / ".cache" / "bench" / "router.log").open("w")
        router = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        stack.callback(router.wait, 30)
        stack.callback(router.terminate)
        url = f"http://127.0.0.1:{port}"
        wait_router(url, 1)
        direct = bench(a.url, a.model_dir, args)
        one = bench(url, a.model_dir, args)
        RouterClient(url).add_worker(b.url)
        wait_router(url, 2)
        two = bench(url, a.model_dir, args)
    print(f"{args.requests} requests, concurrency {args.concurrency}, 64 tokens in, "
          f"{args.output_len} out; one run each, ratios against the direct run")
    print(f"{'':<28} {'tok/s':>9} {'ratio':>7} {'TTFT ms':>10} {'ratio':>7} {'E2E ms':>10} "
          f"{'ratio':>7}")
    print(row("one replica, direct", direct, direct))
    print(row("router, one replica", one, direct))
    print(row("router, two replicas", two, direct))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
