"""``ascend-serve bench`` through the real vllm-router binary, in front of two stub replicas.

The stubs (``ascend_serve.bench.openai_stub``: OpenAI-compatible SSE, no model) keep it cheap;
``tests/integration/test_router.py`` runs the official client and ``vllm bench serve`` through
the router over real tiny vLLM servers, and ``tests/integration/test_local_deploy.py`` runs
``ascend-serve validate`` through the router the role deploys. Here: the router built from
``ascend_serve.serving.router`` (as the role's unit is) over two replicas, every request of a
bench completed, both replicas served, one replica drained at runtime gets nothing more.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
from routerproc import running_router

from ascend_serve.bench.openai_stub import StubServer
from ascend_serve.serving.router import WorkerHost


def _word_tokenizer(path: Path) -> Path:
    """A whitespace word tokenizer (the stub counts prompt tokens as words)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(300)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=next(iter(vocab))))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path))
    return path


def _bench(url: str, prompts: int, out: Path) -> dict[str, object]:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ascend-serve"), "bench", "run", url,
         "--tokenizer", str(_word_tokenizer(out.parent / "tokenizer.json")),
         "--num-prompts", str(prompts), "--concurrency", "2", "--input-len", "16",
         "--output-len", "4", "--warmup", "0", "--no-telemetry", "--out", str(out), "--json"],
        capture_output=True, text=True, check=False, timeout=120,
        env={k: v for k, v in os.environ.items() if "proxy" not in k.lower()})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _completed(result: dict[str, object]) -> tuple[object, object, object]:
    """vllm bench serve's names: prompts, completed, failed."""
    return (result["num_prompts"], result["completed"], result["failed"])


def test_ascend_serve_bench_through_the_router(tmp_path: Path) -> None:
    with StubServer() as a, StubServer() as b:
        hosts = [WorkerHost("a", "127.0.0.1", (a.port,)), WorkerHost("b", "127.0.0.1", (b.port,))]
        with running_router(tmp_path, hosts) as url:
            result = _bench(url, 8, tmp_path / "one")
            assert _completed(result) == (8, 8, 0), result
            served = (a.counters.requests, b.counters.requests)
            print(f"\nascend-serve bench through vllm-router: 8 completed, 0 failed; "
                  f"per replica {served}")
            assert min(served) > 0 and sum(served) == 8
            # b drained at runtime (what the rollout's drain does on the running router).
            removed = httpx.post(f"{url}/remove_worker", params={"url": b.url}, timeout=10,
                                 trust_env=False)
            assert removed.status_code == 200, removed.text
            result = _bench(url, 4, tmp_path / "two")
            assert _completed(result) == (4, 4, 0), result
            assert (a.counters.requests, b.counters.requests) == (served[0] + 4, served[1])
