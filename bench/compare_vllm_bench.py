#!/usr/bin/env python3
"""Run ``vllm bench serve`` and ``ascend-serve bench`` against the same tiny vLLM server.

Starts one tiny DeepSeek-V3 vLLM CPU server (``bench/tiny_vllm.py``), then alternates the two
clients (vLLM, ours, ours, vLLM, … ``--repeats`` times each, after one uncounted priming run)
with the same settings: random prompts of ``--input-len`` tokens, ``--output-len`` output
tokens with ignore_eos, the same number of prompts, concurrency, seed and one warm-up request.
Prints each headline metric for both (the median over the repeats), the ratio ours/vLLM and
every run's value (the noise); then the server's own mean TTFT, ITL and E2E latency over each
client's runs (its /metrics histograms), which tells a client's measurement apart from the
load it made.

Run from the repository root, in the project's venv (about 4 minutes on 2 cores)::

    .venv/bin/python bench/compare_vllm_bench.py [--num-prompts 32 --concurrency 4 \\
        --input-len 64 --output-len 32 --repeats 4] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import httpx
from tiny_vllm import TinyServer, tiny_server

from ansible_collections.ascend_serve.fleet.plugins.module_utils.validate_wire import parse_metrics
from ascend_serve.bench.runner import BenchConfig, run_benchmark

# The server's own view of each run (histogram means from /metrics deltas): what both clients
# should see, give or take the network and the client's parsing.
SERVER_SIDE = {"server_mean_ttft_ms": "vllm:time_to_first_token_seconds",
               "server_mean_itl_ms": "vllm:inter_token_latency_seconds",
               "server_mean_e2el_ms": "vllm:e2e_request_latency_seconds"}
HEADLINE = ["completed", "request_throughput", "output_throughput",
            "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
            "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
            "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
            "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms"]


def run_vllm(server: TinyServer, args: argparse.Namespace, out: Path, n: int) -> dict[str, Any]:
    name = f"vllm-{n}.json"
    command = [str(server.vllm_bin), "bench", "serve", "--backend", "openai",
               "--base-url", server.url, "--endpoint", "/v1/completions",
               "--model", server.served_name, "--tokenizer", str(server.model_dir),
               "--dataset-name", "random", "--random-input-len", str(args.input_len),
               "--random-output-len", str(args.output_len), "--num-prompts",
               str(args.num_prompts), "--max-concurrency", str(args.concurrency),
               "--seed", str(args.seed), "--ignore-eos", "--num-warmups", "1",
               "--metric-percentiles", "50,90,99", "--percentile-metrics",
               "ttft,tpot,itl,e2el", "--save-result", "--save-detailed",
               "--result-dir", str(out), "--result-filename", name, "--disable-tqdm"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "OPENAI_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"vllm bench serve failed ({done.returncode}):\n{done.stdout[-3000:]}"
                         f"\n{done.stderr[-3000:]}")
    data: dict[str, Any] = json.loads((out / name).read_text())
    return data


def run_ours(server: TinyServer, args: argparse.Namespace, out: Path, n: int) -> dict[str, Any]:
    config = BenchConfig(url=server.url, model=server.served_name, endpoint="completions",
                         max_concurrency=args.concurrency, num_prompts=args.num_prompts,
                         input_len=args.input_len, output_len=args.output_len,
                         tokenizer=str(server.model_dir), warmup=1, seed=args.seed,
                         ignore_eos=True, percentiles=(50.0, 90.0, 99.0))
    data = run_benchmark(config).to_json_dict()
    (out / f"ours-{n}.json").write_text(json.dumps(data))
    return data


def server_histograms(url: str) -> dict[str, float]:
    samples = parse_metrics(httpx.get(url + "/metrics", timeout=10, trust_env=False).text)
    return {k: v for k, v in samples.items() if k.endswith(("_sum", "_count"))}


def measured(run: Callable[[TinyServer, argparse.Namespace, Path, int], dict[str, Any]],
             server: TinyServer, args: argparse.Namespace, out: Path, n: int
             ) -> dict[str, Any]:
    """A client's result plus the server-side means of the same run (warm-up included)."""
    before = server_histograms(server.url)
    data = run(server, args, out, n)
    after = server_histograms(server.url)
    for key, family in SERVER_SIDE.items():
        count = after[f"{family}_count"] - before[f"{family}_count"]
        total = after[f"{family}_sum"] - before[f"{family}_sum"]
        data[key] = total / count * 1000 if count else 0.0
    return data


def table(vllm_runs: list[dict[str, Any]], our_runs: list[dict[str, Any]]) -> str:
    lines = [f"{'metric (median of runs)':<24} {'vllm bench':>11} {'ours':>11} {'ours/vllm':>10}"
             "   every run (vllm | ours)"]
    for key in HEADLINE + list(SERVER_SIDE):
        theirs = [float(r[key]) for r in vllm_runs]
        ours = [float(r[key]) for r in our_runs]
        a, b = median(theirs), median(ours)
        ratio = f"{b / a:.3f}" if a else "-"
        each = " ".join(f"{v:.1f}" for v in theirs) + " | " + " ".join(f"{v:.1f}" for v in ours)
        lines.append(f"{key:<24} {a:>11.2f} {b:>11.2f} {ratio:>10}   {each}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=4, help="runs of each client")
    parser.add_argument("--keep", type=Path, help="keep every result JSON in this directory")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as scratch:
        out = args.keep or Path(scratch)
        out.mkdir(parents=True, exist_ok=True)
        with tiny_server() as server:
            print("priming the server (one run of ours, not counted) ...", flush=True)
            run_ours(server, args, out, -1)
            vllm_runs: list[dict[str, Any]] = []
            our_runs: list[dict[str, Any]] = []
            clients = [("vllm bench serve", run_vllm, vllm_runs),
                       ("ascend-serve bench", run_ours, our_runs)]
            for n in range(args.repeats):
                # A B B A …: a drift of the machine's load hits both clients alike.
                for name, run, runs in (clients if n % 2 == 0 else clients[::-1]):
                    print(f"run {n + 1}/{args.repeats}: {name} ...", flush=True)
                    runs.append(measured(run, server, args, out, n))
        print()
        print(f"tiny DeepSeek-V3 on vLLM 0.32 (CPU), completions, {args.num_prompts} prompts, "
              f"input {args.input_len} / output {args.output_len} tokens (ignore_eos), "
              f"concurrency {args.concurrency}, {args.repeats} runs each, alternated")
        print(table(vllm_runs, our_runs))
        tokens = {(sum(r["input_lens"]), sum(r["output_lens"])) for r in vllm_runs + our_runs}
        print(f"(input, output) tokens per run, both clients: {sorted(tokens)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
