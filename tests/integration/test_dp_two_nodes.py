"""Data parallelism across two "nodes" with the real vLLM (CPU build): the launchers that
the vllm_service role's ``vllm-launch.sh.j2`` renders from the profile ``tiny-qwen2-2nodes`` for
rank 0 (the head: ``vllm serve --data-parallel-size 2 --data-parallel-size-local 1
--data-parallel-address ADDR --data-parallel-rpc-port PORT``) and rank 1 (``--headless
--data-parallel-start-rank 1``), the same template and layout code as the multi-node DeepSeek
profiles, run as two process groups on 127.0.0.1 with their own TMPDIR and state directories.

Two models, the two kinds of DP rank in vLLM 0.32 (``v1/engine/core.py``, ``run_engine_core``):

- tiny Qwen2 (dense): independent ranks; only the control plane spans the nodes (handshake on
  the RPC port, the head's DP coordinator and load balancer, ZeroMQ to each engine);
- tiny DeepSeek-V3 with every layer dense: vLLM still treats it as MoE, so the ranks are
  coordinated as in the DeepSeek profiles: a gloo DP group across both nodes, DP padding
  all-reduce each step, dummy batches in lockstep.

The plain tiny DeepSeek-V3 (a MoE layer) starts and passes /health in this layout too, but its
engines die on the first forward pass: vLLM 0.32's ``CpuCommunicator`` has no ``all_gatherv``
(``base_device_communicator.py``: ``raise NotImplementedError``), which the all-gather /
reduce-scatter MoE dispatch of DP ranks needs (vllm-project/vllm#57837).

Evidence that both DP ranks served: ``vllm:request_success_total`` of the head's /metrics carries
an ``engine`` label, the DP rank ("0" on the head, "1" on the headless node).
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from vllm_server import (
    HEALTH_TIMEOUT_S,
    VllmPool,
    build_tiny_model,
    free_port,
    log_tail,
    stop_group,
    vllm_python,
    wait_healthy,
)

from ascend_serve.serving import launcher
from ascend_serve.serving.profiles import Profile, resolve

pytestmark = pytest.mark.vllm

PROFILE = "tiny-qwen2-2nodes"
SUCCESS = re.compile(r'^vllm:request_success_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$')


def _start(name: str, profile: Profile, rank: int, model: Path, work: Path,
           ) -> tuple[subprocess.Popen[bytes], Path]:
    """One "node": the launcher rendered for ``rank``, run in its own process group with its own
    TMPDIR and state directory (the launcher puts vLLM's caches there), log in ``work/NAME.log``."""
    state, tmp = work / name / "state", work / name / "tmp"
    for path in (state, tmp):
        path.mkdir(parents=True, exist_ok=True)
    ctx = launcher.context(profile, model_path=str(model), vllm=str(vllm_python().parent / "vllm"),
                           state_dir=str(state), rank=rank, head_address=str(profile.host))
    script = work / name / "launch.sh"
    script.write_text(launcher.render(ctx), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    env["TMPDIR"] = str(tmp)
    log_path = work / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(["bash", str(script)], cwd=work / name, env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    return proc, log_path


def _wait_both(head: subprocess.Popen[bytes], head_log: Path, node: subprocess.Popen[bytes],
               node_log: Path, url: str) -> float:
    """Seconds until the head is healthy; fails early when the headless node exits (the head
    would wait for its engine forever: vLLM's engine handshake has no timeout)."""
    started = time.monotonic()
    while True:
        if (rc := node.poll()) is not None:
            pytest.fail(f"the headless node exited with {rc} before the head was healthy; "
                        f"{node_log} ends:\n{log_tail(node_log)}", pytrace=False)
        try:
            wait_healthy(head, url, head_log, 5.0)
            return time.monotonic() - started
        except pytest.fail.Exception:
            if head.poll() is not None or time.monotonic() - started > HEALTH_TIMEOUT_S:
                raise


def _all_dense_deepseek(base: Path, out: Path) -> Path:
    """The tiny DeepSeek-V3 ``base`` with every layer dense (``first_k_dense_replace`` = layers,
    random weights): still MoE to vLLM (``n_routed_experts``), yet no layer runs the experts."""
    if not (out / "config.json").is_file():
        import torch
        import transformers

        config = transformers.AutoConfig.from_pretrained(base)
        config.first_k_dense_replace = config.num_hidden_layers
        torch.manual_seed(0)
        auto: Any = transformers.AutoModelForCausalLM
        model = auto.from_config(config, dtype=torch.bfloat16)
        model.save_pretrained(str(out), safe_serialization=True)
        for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
            shutil.copy2(base / name, out / name)
        for path in out.iterdir():
            path.chmod(0o644)
    return out


def _successes_per_engine(metrics: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in metrics.splitlines():
        if match := SUCCESS.match(line):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
            counts[labels.get("engine", "?")] += int(float(match["value"]))
    return counts


@pytest.mark.parametrize("kind", ["qwen2-independent", "deepseek_v3-dense-coordinated"])
def test_dp_two_nodes_serve_from_both_ranks(vllm_pool: VllmPool, kind: str) -> None:
    vllm_pool.use()  # one vLLM workload at a time on this machine: stop the shared servers
    vllm = vllm_python().parent / "vllm"
    assert vllm.is_file(), f"no vllm CLI in the vLLM venv ({vllm}): run scripts/bootstrap.sh"
    assert resolve(PROFILE).nodes == 2
    models = vllm_pool.root / "models"
    if kind == "qwen2-independent":
        model = build_tiny_model("qwen2", models / "qwen2")
    else:
        model = _all_dense_deepseek(build_tiny_model("deepseek_v3", models / "deepseek_v3"),
                                    models / "deepseek_v3-all-dense")
    # Short: vLLM's ZeroMQ IPC sockets go under TMPDIR, and a socket path may not exceed 107 bytes.
    work = vllm_pool.root / ("dp-q" if kind == "qwen2-independent" else "dp-d")
    work.mkdir(exist_ok=True)
    address, api_port, rpc_port = "127.0.0.1", free_port(), free_port()
    profile = resolve(PROFILE, {"host": address, "port": api_port,
                                "parallel": {"rpc_port": rpc_port}})
    procs: list[subprocess.Popen[bytes]] = []
    try:
        head, head_log = _start("head", profile, 0, model, work)
        procs.append(head)
        node, node_log = _start("node1", profile, 1, model, work)
        procs.append(node)
        url = f"http://{address}:{api_port}"
        startup_s = _wait_both(head, head_log, node, node_log, url)
        print(f"{kind}: DP=2 over two process groups healthy in {startup_s:.1f} s")

        def complete(i: int) -> httpx.Response:
            return httpx.post(f"{url}/v1/completions", timeout=120.0, trust_env=False,
                              json={"model": "tiny-qwen2", "prompt": f"request {i}:",
                                    "max_tokens": 8, "temperature": 0})

        # Unpinned: the head's load balancer spreads a burst over both ranks (round robin
        # when they are equally loaded).
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            responses = list(pool.map(complete, range(8)))
        bad = [(r.status_code, r.text[:200]) for r in responses if r.status_code != 200]
        assert not bad, f"failed completions: {bad}; {head_log} ends:\n{log_tail(head_log)}"
        assert all(r.json()["choices"][0]["text"] for r in responses)

        metrics = httpx.get(f"{url}/metrics", timeout=10.0, trust_env=False).text
        per_engine = _successes_per_engine(metrics)
        assert sum(per_engine.values()) == 8, per_engine
        assert per_engine["0"] > 0 and per_engine["1"] > 0, (
            f"not both DP ranks served: {dict(per_engine)}; {node_log} ends:\n"
            f"{log_tail(node_log)}")

        # Pinned to the headless node's rank (vLLM's X-data-parallel-rank header).
        pinned = httpx.post(f"{url}/v1/completions", timeout=120.0, trust_env=False,
                            headers={"X-data-parallel-rank": "1"},
                            json={"model": "tiny-qwen2", "prompt": "pinned", "max_tokens": 4})
        assert pinned.status_code == 200, pinned.text
        metrics = httpx.get(f"{url}/metrics", timeout=10.0, trust_env=False).text
        after = _successes_per_engine(metrics)
        assert after["1"] == per_engine["1"] + 1 and after["0"] == per_engine["0"], after
        assert head.poll() is None and node.poll() is None
        if kind == "deepseek_v3-dense-coordinated":  # one torch DP group over both nodes
            assert "in world size 2 is assigned as DP rank 1" in log_tail(node_log, 10**6)
    finally:
        errors = []
        for proc in procs:  # head first, then the headless node; each asserts nothing is left
            try:
                stop_group(proc)
            except AssertionError as exc:
                errors.append(str(exc))
        assert not errors, "; ".join(errors)
