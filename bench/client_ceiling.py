#!/usr/bin/env python3
"""How much load ``ascend-serve bench``'s client itself can make, and what latency it adds.

Starts the trivial OpenAI-compatible streaming endpoint ``python -m ascend_serve.bench.openai_stub``
in its own process (so client and stub each have a core) and runs the load generator against
it at increasing concurrency:

1. throughput: the stub answers at once (no delay) with ``--tokens`` chunks per request; the
   requests/s and tokens/s the client sustains are its ceiling (a lower bound: the Python stub
   on the other core may be the limit);
2. added latency: the stub waits ``--ttft-ms`` before the first token and ``--itl-ms`` between
   tokens; measured TTFT and E2E latency minus those programmed delays is what the client (and
   the loopback network) adds;
3. headroom: the ceiling against what the tiny vLLM CPU server serves, from a bench JSON result
   (``--vllm-json``, ours or ``vllm bench serve``'s) or measured now (``--measure-vllm``, starts
   the server of ``bench/tiny_vllm.py``).

Run from the repository root, in the project's venv (about 1 minute; 2 more with
``--measure-vllm``)::

    .venv/bin/python bench/client_ceiling.py [--concurrency 1,4,16,64,256] [--tokens 16,256]
        [--measure-vllm | --vllm-json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiny_vllm import free_port, tiny_server

from ascend_serve.bench.runner import BenchConfig, BenchResult, run_benchmark


def word_tokenizer(directory: Path) -> Path:
    """A word-level tokenizer (one whitespace word = one token) for the stub's prompts."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(1000)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=next(iter(vocab))))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = directory / "tokenizer.json"
    tok.save(str(path))
    return path


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Stub:
    url: str
    pid: int


@dataclass
class Measured:
    result: BenchResult
    client_cpu: float  # share of one core, 0..1
    stub_cpu: float


def measure(stub: Stub, tokenizer: Path, concurrency: int, tokens: int,
            requests: int) -> Measured:
    """One run, with the CPU share the client (this process) and the stub used meanwhile."""
    wall, mine, theirs = time.perf_counter(), time.process_time(), cpu_seconds(stub.pid)
    result = run(stub.url, tokenizer, concurrency, tokens, requests)
    wall = time.perf_counter() - wall
    return Measured(result, (time.process_time() - mine) / wall,
                    (cpu_seconds(stub.pid) - theirs) / wall)


@contextmanager
def stub_process(ttft_ms: float = 0.0, itl_ms: float = 0.0) -> Iterator[Stub]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "ascend_serve.bench.openai_stub", "--port",
                             str(port), "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms)],
                            stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the stub server did not start") from None
                time.sleep(0.1)
        yield Stub(f"http://127.0.0.1:{port}", proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


def run(url: str, tokenizer: Path, concurrency: int, tokens: int, requests: int) -> BenchResult:
    config = BenchConfig(url=url, tokenizer=str(tokenizer), max_concurrency=concurrency,
                         num_prompts=requests, input_len=16, output_len=tokens, warmup=0,
                         percentiles=(50.0, 99.0))
    result = run_benchmark(config)
    if result.failed:
        raise SystemExit(f"{result.failed} requests failed: {result.first_errors()}")
    return result


def ceiling(tokenizer: Path, levels: list[int], token_counts: list[int],
            seconds: float) -> tuple[float, float]:
    print("1. throughput against an instant stub (client and stub on one core each; CPU: share "
          "of one core)")
    print(f"{'tokens/answer':>13} {'concurrency':>11} {'requests':>8} {'req/s':>7} "
          f"{'tokens/s':>9} {'mean E2E ms':>11} {'client CPU':>10} {'stub CPU':>8}")
    best_rps = best_tps = 0.0
    with stub_process() as stub:
        for tokens in token_counts:
            for c in levels:
                probe = run(stub.url, tokenizer, c, tokens, max(50, 2 * c))  # sizes the run
                n = max(4 * c, int(probe.request_throughput * seconds))
                m = measure(stub, tokenizer, c, tokens, n)
                r = m.result
                best_rps = max(best_rps, r.request_throughput)
                best_tps = max(best_tps, r.output_throughput)
                print(f"{tokens:>13} {c:>11} {n:>8} {r.request_throughput:>7.0f} "
                      f"{r.output_throughput:>9.0f} {r.metrics['mean_e2el_ms']:>11.1f} "
                      f"{m.client_cpu:>10.0%} {m.stub_cpu:>8.0%}", flush=True)
    print(f"client ceiling: {best_rps:.0f} requests/s, {best_tps:.0f} output tokens/s")
    return best_rps, best_tps


def added_latency(tokenizer: Path, levels: list[int], ttft_ms: float, itl_ms: float,
                  tokens: int) -> None:
    e2e_ms = ttft_ms + (tokens - 1) * itl_ms
    print(f"\n2. latency the client adds (stub: TTFT {ttft_ms:g} ms, ITL {itl_ms:g} ms, "
          f"{tokens} tokens = E2E {e2e_ms:g} ms programmed)")
    print(f"{'concurrency':>11} {'tokens/s':>8} {'mean +TTFT ms':>13} {'p99 +TTFT ms':>12} "
          f"{'mean +E2E ms':>12} {'p99 +E2E ms':>11} {'mean ITL ms':>11} {'client CPU':>10} "
          f"{'stub CPU':>8}")
    with stub_process(ttft_ms, itl_ms) as stub:
        for c in levels:
            m = measure(stub, tokenizer, c, tokens, max(4 * c, 40))
            r = m.result.metrics
            print(f"{c:>11} {m.result.output_throughput:>8.0f} "
                  f"{r['mean_ttft_ms'] - ttft_ms:>13.2f} {r['p99_ttft_ms'] - ttft_ms:>12.2f} "
                  f"{r['mean_e2el_ms'] - e2e_ms:>12.2f} {r['p99_e2el_ms'] - e2e_ms:>11.2f} "
                  f"{r['mean_itl_ms']:>11.2f} {m.client_cpu:>10.0%} {m.stub_cpu:>8.0%}",
                  flush=True)


def vllm_figures(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.vllm_json is not None:
        data: dict[str, Any] = json.loads(args.vllm_json.read_text())
        return data
    if not args.measure_vllm:
        return None
    with tiny_server() as server:
        config = BenchConfig(url=server.url, max_concurrency=16, num_prompts=64, input_len=64,
                             output_len=32, tokenizer=str(server.model_dir), warmup=2)
        return run_benchmark(config).to_json_dict()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--concurrency", default="1,4,16,64,256")
    parser.add_argument("--tokens", default="16,256", help="answer lengths of the ceiling runs")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each run")
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--itl-ms", type=float, default=5.0)
    parser.add_argument("--latency-tokens", type=int, default=32)
    parser.add_argument("--vllm-json", type=Path, help="a bench result against the tiny vLLM")
    parser.add_argument("--measure-vllm", action="store_true",
                        help="start the tiny vLLM server and measure it (concurrency 16)")
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    token_counts = [int(t) for t in args.tokens.split(",")]

    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = word_tokenizer(Path(scratch))
        best_rps, best_tps = ceiling(tokenizer, levels, token_counts, args.seconds)
        added_latency(tokenizer, levels, args.ttft_ms, args.itl_ms, args.latency_tokens)
    served = vllm_figures(args)
    if served is not None:
        rps, tps = float(served["request_throughput"]), float(served["output_throughput"])
        print(f"\n3. tiny vLLM CPU server: {rps:.2f} requests/s, {tps:.1f} output tokens/s "
              f"(concurrency {served.get('max_concurrency')}, "
              f"{sum(served['output_lens']) // max(1, len(served['output_lens']))} tokens/answer)")
        print(f"headroom of the client: {best_rps / rps:.0f}x the requests/s, "
              f"{best_tps / tps:.0f}x the tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
