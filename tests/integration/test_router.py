"""vllm-router in front of real tiny vLLM (CPU build) servers: two replicas, and prefill/decode.

One router and two replicas (tiny DeepSeek-V3, float32, each with an API key) serve the whole
module; the module's tests run in file order and the last one kills a replica.

- The official ``openai`` client and ``vllm bench serve`` go through the router: every request
  completes, and both replicas' ``vllm:request_success_total`` grow by what was sent.
- vllm-router 0.1.17 in regular mode passes the client's ``Authorization`` header on to the
  worker (``src/routers/http/router.rs``, ``send_typed_request``); its ``--api-key`` is not added
  there, so a client without the workers' key gets the worker's 401. A worker removed with
  ``POST /remove_worker`` is back after a router restart (the list comes from the command line).
- PD: vLLM's ``ExampleConnector`` (shared storage) on a ``kv_producer`` and a ``kv_consumer``
  behind the router's ``--vllm-pd-disaggregation`` mode (default ``--kv-connector nixl``: prefill
  with ``max_tokens`` 1, then decode). The consumer's ``vllm:external_prefix_cache_hits_total``
  and its ``Inject KV cache of N tokens`` lines show the loads; overwriting the stored KV files
  changes the consumer's answer to the same prompt, so the answer came from the loaded KV
  cache; at temperature 0 and float32 the PD answers equal a colocated replica's.
- A replica killed (SIGKILL) while it runs a request, in the middle of a ``vllm bench serve``
  (streamed) and a non-streamed ``openai`` load: no non-streamed request fails (the router's
  retries), the breaker opens, and the count of streamed requests cut is printed.

The router venv is ``.cache/router-venv`` (``ASCEND_ROUTER_VENV``), with ``vllm-router==0.1.17``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
import pytest
from paths import ROOT
from vllm_server import (
    HEALTH_TIMEOUT_S,
    VllmPool,
    build_tiny_model,
    free_port,
    log_tail,
    parse_serve_commands,
    stop_group,
    vllm_python,
    wait_healthy,
)

from ascend_serve.fleet.scale import Policy, RouterActuator, Sample, checks_validator, run
from ascend_serve.serving.load_metrics import DEFAULT_TARGETS, replica_values
from ascend_serve.serving.router import (
    PdEngine,
    PdNode,
    RouterSettings,
    Worker,
    pd_router_argv,
    pd_router_workers,
    router_argv,
    vllm_serve_argv,
)
from ascend_serve.serving.router_api import RouterClient

pytestmark = pytest.mark.vllm

ROUTER_VENV = Path(os.environ.get("ASCEND_ROUTER_VENV")
                   or Path(__file__).resolve().parents[2] / ".cache" / "router-venv")
ROUTER_VERSION = "0.1.17"
SERVED = "tiny-deepseek-v3"
# float32: the PD answers are compared with a colocated server's.
FLAGS = ["--max-model-len", "512", "--dtype", "float32", "--enforce-eager",
         "--distributed-executor-backend", "uni", "--kv-cache-memory-bytes", str(256 * 1024 * 1024)]
# Retries and a breaker that opens after 2 failures; health checks every second.
SETTINGS = RouterSettings(policy="round_robin", retry_max_retries=3, cb_failure_threshold=2,
                          cb_timeout_duration_secs=60, health_check_interval_secs=1,
                          health_failure_threshold=2)
# A prompt of 365 tokens with the tiny tokenizer: ExampleConnector stores and loads whole
# 16-token blocks of the prompt but its last token (example_connector.py: align_to_block_size).
# A real burst on a tiny vLLM server (tests/data/scale/SOURCES): the scaling loop's load.
RECORDED_BURST = ROOT / "tests" / "data" / "scale" / "tiny-qwen2-burst.jsonl"
PROMPTS = [" ".join(f"w{(i * 7 + j) % 50}" for j in range(180)) for i in range(2)]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    for proxy in ("http_proxy", "https_proxy", "all_proxy"):
        env.pop(proxy, None)
        env.pop(proxy.upper(), None)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
               DO_NOT_TRACK="1", VLLM_ENABLE_V1_MULTIPROCESSING="0", **extra)
    return env


def router_executable() -> Path:
    exe = ROUTER_VENV / "bin" / "vllm-router"
    if not exe.is_file():
        pytest.fail(f"no vllm-router in {ROUTER_VENV} (ASCEND_ROUTER_VENV): create it with "
                    f"`uv venv {ROUTER_VENV} && uv pip install --python {ROUTER_VENV}/bin/python "
                    f"vllm-router=={ROUTER_VERSION}`", pytrace=False)
    return exe


@dataclass
class Proc:
    name: str
    url: str
    log: Path
    proc: subprocess.Popen[bytes]
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)


def _spawn(name: str, argv: list[str], env: dict[str, str], work: Path, url: str) -> Proc:
    work.mkdir(parents=True, exist_ok=True)
    log = work / f"{name}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    return Proc(name, url, log, proc, argv, env)


def start_vllm(name: str, model: Path, work: Path, key: str, extra: list[str] | None = None,
               port: int | None = None) -> Proc:
    port = port or free_port()
    tmp = work / name / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = _env(TMPDIR=str(tmp), VLLM_CACHE_ROOT=str(work / name / "cache"))
    argv = [str(vllm_python()), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--served-model-name", SERVED, "--host", "127.0.0.1", "--port", str(port), *FLAGS,
            "--api-key", key, *(extra or [])]
    return _spawn(name, argv, env, work / name, f"http://127.0.0.1:{port}")


def start_router(argv: list[str], work: Path, port: int, env: dict[str, str]) -> Proc:
    proc = _spawn("router", argv, env, work / "router", f"http://127.0.0.1:{port}")
    wait_up(proc, 60)
    return proc


def wait_up(proc: Proc, timeout: float) -> None:
    """The router: ``GET /health`` 200 (it answers once its workers are healthy)."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.proc.poll() is not None:
            pytest.fail(f"{proc.name} exited with {proc.proc.returncode}:\n{log_tail(proc.log)}",
                        pytrace=False)
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{proc.url}/health", timeout=2, trust_env=False).status_code == 200:
                return
        if time.monotonic() > deadline:
            pytest.fail(f"{proc.name} not healthy in {timeout:g} s:\n{log_tail(proc.log)}",
                        pytrace=False)
        time.sleep(0.3)


def stop(proc: Proc) -> None:
    if proc.proc.poll() is None or proc.proc.returncode is None:
        stop_group(proc.proc)


def metric(url: str, name: str, key: str | None = None, **labels: str) -> float:
    """The sum of the samples of ``name`` (with these label values) on ``url``/metrics."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    text = httpx.get(f"{url}/metrics", headers=headers, timeout=10, trust_env=False).text
    total = 0.0
    for line in text.splitlines():
        sample, _, value = line.rpartition(" ")
        metric_name = sample.split("{", 1)[0]
        if metric_name != name:
            continue
        if all(f'{k}="{v}"' in sample for k, v in labels.items()):
            total += float(value)
    return total


def wait_counter(url: str, name: str, key: str, at_least: float, timeout: float = 10) -> float:
    """The counter once it reaches ``at_least`` (vLLM counts after the last byte) or after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (value := metric(url, name, key)) < at_least and time.monotonic() < deadline:
        time.sleep(0.2)
    return value


@dataclass
class Fleet:
    work: Path
    model: Path
    key: str
    a: Proc
    b: Proc
    router: Proc
    metrics_url: str


@pytest.fixture(scope="module")
def fleet(vllm_pool: VllmPool) -> Iterator[Fleet]:
    vllm_pool.use()  # one vLLM workload at a time on this machine: stop the shared servers
    exe = router_executable()
    model = build_tiny_model("deepseek_v3", vllm_pool.root / "models" / "deepseek_v3")
    work = vllm_pool.root / "router"
    key = f"test-{secrets.token_hex(12)}"
    a = start_vllm("a", model, work, key)
    b = start_vllm("b", model, work, key)
    procs = [a, b]
    current: Fleet | None = None
    try:
        for replica in (a, b):
            wait_healthy(replica.proc, replica.url, replica.log, HEALTH_TIMEOUT_S)
        port, metrics_port = free_port(), free_port()
        settings = dataclasses.replace(SETTINGS, port=port, prometheus_port=metrics_port)
        argv = router_argv(str(exe), [Worker("127.0.0.1", int(p.url.rsplit(":", 1)[1]))
                                      for p in (a, b)], settings, api_key=key)
        router = start_router(argv, work, port, _env())
        procs.append(router)
        current = Fleet(work, model, key, a, b, router, f"http://127.0.0.1:{metrics_port}")
        yield current
    finally:
        # A test may restart the router (fleet.router is then a new process): stop that one too.
        if current is not None:
            stop(current.router)
        for proc in reversed(procs):
            stop(proc)


def _chat(client: openai.OpenAI, text: str, stream: bool = False) -> str:
    if stream:
        parts = client.chat.completions.create(
            model=SERVED, messages=[{"role": "user", "content": text}], max_tokens=8,
            temperature=0, stream=True, extra_body={"ignore_eos": True})
        return "".join(c.choices[0].delta.content or "" for c in parts if c.choices)
    answer = client.chat.completions.create(
        model=SERVED, messages=[{"role": "user", "content": text}], max_tokens=8, temperature=0,
        extra_body={"ignore_eos": True})
    assert answer.usage is not None and answer.usage.completion_tokens == 8
    return answer.choices[0].message.content or ""


def _bench(fleet: Fleet, num_prompts: int, concurrency: int, output_len: int,
           tmp: Path) -> subprocess.Popen[str]:
    command = [str(vllm_python()), "-m", "vllm.entrypoints.cli.main", "bench", "serve",
               "--backend", "openai-chat", "--base-url", fleet.router.url,
               "--endpoint", "/v1/chat/completions", "--model", SERVED,
               "--tokenizer", str(fleet.model), "--dataset-name", "random",
               "--random-input-len", "16", "--random-output-len", str(output_len),
               "--num-prompts", str(num_prompts), "--max-concurrency", str(concurrency),
               "--ignore-eos", "--seed", "0", "--disable-tqdm", "--save-result",
               "--result-dir", str(tmp), "--result-filename", "bench.json"]
    # vllm bench serve sends OPENAI_API_KEY as the bearer token; the router passes it on.
    return subprocess.Popen(command, cwd=tmp, env=_env(OPENAI_API_KEY=fleet.key, TMPDIR=str(tmp)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _successes(fleet: Fleet) -> dict[str, float]:
    return {p.name: metric(p.url, "vllm:request_success_total", fleet.key)
            for p in (fleet.a, fleet.b)}


def test_openai_client_and_vllm_bench_through_the_router(fleet: Fleet, tmp_path: Path) -> None:
    before = _successes(fleet)
    client = openai.OpenAI(base_url=f"{fleet.router.url}/v1", api_key=fleet.key, max_retries=0,
                           timeout=120, http_client=openai.DefaultHttpx2Client(trust_env=False))
    for i in range(4):
        assert _chat(client, f"hello {i}")
    for i in range(2):
        assert _chat(client, f"stream {i}", stream=True)
    bench = _bench(fleet, num_prompts=8, concurrency=2, output_len=3, tmp=tmp_path)
    output, _ = bench.communicate(timeout=300)
    assert bench.returncode == 0, output[-3000:]
    data = json.loads((tmp_path / "bench.json").read_text(encoding="utf-8"))
    assert (data["num_prompts"], data["completed"], data["failed"]) == (8, 8, 0)
    assert data["total_output_tokens"] == 8 * 3
    sent = 4 + 2 + 8
    deadline = time.monotonic() + 10
    while sum((after := _successes(fleet)).values()) - sum(before.values()) < sent:
        assert time.monotonic() < deadline, (before, after)
        time.sleep(0.2)
    delta = {name: after[name] - before[name] for name in after}
    print(f"\nthrough the router: {sent} requests, per replica {delta}")
    assert sum(delta.values()) == sent
    assert delta["a"] > 0 and delta["b"] > 0  # round_robin: both replicas served


def test_the_router_passes_the_client_key_and_forgets_runtime_removals(fleet: Fleet) -> None:
    body = {"model": SERVED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    url = f"{fleet.router.url}/v1/chat/completions"
    # No client key, a wrong one: the worker's 401 (the router adds no key of its own here).
    assert httpx.post(url, json=body, timeout=60, trust_env=False).status_code == 401
    wrong = {"Authorization": "Bearer wrong"}
    assert httpx.post(url, json=body, headers=wrong, timeout=60, trust_env=False).status_code == 401
    good = {"Authorization": f"Bearer {fleet.key}"}
    assert httpx.post(url, json=body, headers=good, timeout=60, trust_env=False).status_code == 200

    # A runtime removal: b gets nothing; the router's restart brings it back.
    admin = httpx.Client(base_url=fleet.router.url, timeout=10, trust_env=False)
    assert admin.post("/remove_worker", params={"url": fleet.b.url}).status_code == 200
    assert admin.get("/list_workers").json()["urls"] == [fleet.a.url]
    before = _successes(fleet)
    for _ in range(4):
        assert httpx.post(url, json=body, headers=good, timeout=60,
                          trust_env=False).status_code == 200
    after_a = wait_counter(fleet.a.url, "vllm:request_success_total", fleet.key, before["a"] + 4)
    assert after_a - before["a"] == 4
    assert metric(fleet.b.url, "vllm:request_success_total", fleet.key) == before["b"]
    stop(fleet.router)
    port = int(fleet.router.url.rsplit(":", 1)[1])
    fleet.router = start_router(fleet.router.argv, fleet.work, port, fleet.router.env)
    assert sorted(admin.get("/list_workers").json()["urls"]) == sorted([fleet.a.url, fleet.b.url])


def test_fleet_scale_adds_a_validated_replica_then_drains_and_removes_it(fleet: Fleet) -> None:
    """The whole ``fleet scale`` loop once, on the real router and replicas: a with b on
    standby; the recorded burst's busiest scrape adds b (after validate passed on it), the idle
    tail drains b (a request running on it finishes first) and takes it out."""
    admin = httpx.Client(base_url=fleet.router.url, timeout=10, trust_env=False)
    assert admin.post("/remove_worker", params={"url": fleet.b.url}).status_code == 200
    rows = [json.loads(line) for line in RECORDED_BURST.read_text().splitlines()]
    busiest = max(rows, key=lambda r: replica_values(r["text"]).get("waiting", 0.0))
    recorded = iter([busiest, rows[-1]])  # 6 waiting, then none

    def scrape(names: Sequence[str]) -> Sample:
        row = next(recorded)
        return Sample(row["t"], {n: replica_values(row["text"]) for n in names})

    answers: list[httpx.Response] = []
    seen: list[list[str]] = []

    def between_rounds() -> None:
        seen.append(sorted(admin.get("/list_workers").json()["urls"]))
        # A long answer on b, straight to it: the drain must wait for it.
        body = {"model": SERVED, "prompt": "count", "max_tokens": 400, "ignore_eos": True}
        sent = worker.submit(lambda: answers.append(httpx.post(
            f"{fleet.b.url}/v1/completions", json=body, timeout=300, trust_env=False,
            headers={"Authorization": f"Bearer {fleet.key}"})))
        deadline = time.monotonic() + 60
        while metric(fleet.b.url, "vllm:num_requests_running", fleet.key) < 1:
            assert not sent.done(), f"the request ended before it was seen running: {answers}" \
                f" {sent.exception()!r}"
            assert time.monotonic() < deadline, "b never ran the request"
            time.sleep(0.02)

    policy = Policy(1, 2, DEFAULT_TARGETS, up_after_s=0, down_after_s=0, cooldown_s=0)
    try:
        with (RouterClient(fleet.router.url, replica_key=fleet.key) as client,
              concurrent.futures.ThreadPoolExecutor(1) as worker):
            actuator = RouterActuator(client, [fleet.b.url],
                                      checks_validator(fleet.key, concurrency=2, max_tokens=4),
                                      drain_timeout_s=120, drain_poll_s=0.1)
            assert actuator.replicas() == [fleet.a.url]
            result = run(policy, actuator, scrape, steps=2, sleep=between_rounds)
        seen.append(sorted(admin.get("/list_workers").json()["urls"]))
        print(f"\nfleet scale: {[s.done for s in result.steps]}; {actuator.events}")
        assert [s.decision.action for s in result.steps] == ["add", "remove"]
        # /list_workers' order is the registry's, not the order of addition: compare sorted.
        assert seen == [sorted([fleet.a.url, fleet.b.url]), [fleet.a.url]]
        assert actuator.events[0].startswith(f"validate {fleet.b.url} passed")
        assert actuator.events[1].startswith(f"added {fleet.b.url}")
        drained = actuator.events[2]
        assert drained.startswith(f"drained {fleet.b.url}: vllm:num_requests_running 0")
        reads = re.search(r"\((\d+) read", drained)
        assert reads is not None and int(reads[1]) >= 2  # it saw the request running first
        assert [(r.status_code, r.json()["usage"]["completion_tokens"]) for r in answers] == [
            (200, 400)]
        assert actuator.standby == [fleet.b.url]
    finally:  # the next tests want both replicas behind the router
        if fleet.b.url not in admin.get("/list_workers").json()["urls"]:
            admin.post("/add_worker", params={"url": fleet.b.url}, timeout=120)


def test_pd_with_example_connector_behind_the_router(fleet: Fleet) -> None:
    kv_dir = fleet.work / "kv"
    kv_dir.mkdir(exist_ok=True)

    def connector(role: str) -> list[str]:
        config = {"kv_connector": "ExampleConnector", "kv_role": role,
                  "kv_connector_extra_config": {"shared_storage_path": str(kv_dir)}}
        # No prefix caching on the consumer: each request loads from the connector again.
        return ["--kv-transfer-config", json.dumps(config), "--no-enable-prefix-caching"]

    prefill = start_vllm("prefill", fleet.model, fleet.work, fleet.key, connector("kv_producer"))
    decode = start_vllm("decode", fleet.model, fleet.work, fleet.key, connector("kv_consumer"))
    procs = [prefill, decode]
    try:
        for proc in (prefill, decode):
            wait_healthy(proc.proc, proc.url, proc.log, HEALTH_TIMEOUT_S)
        port = free_port()
        settings = RouterSettings(port=port, prometheus_port=free_port(), policy="round_robin")
        argv = pd_router_argv(str(router_executable()),
                              [Worker("127.0.0.1", int(prefill.url.rsplit(":", 1)[1]))],
                              [Worker("127.0.0.1", int(decode.url.rsplit(":", 1)[1]))], settings)
        # The PD mode sends the OPENAI_API_KEY of its environment to both workers
        # (vllm_pd_router.rs), as vllm-ascend's proxy does (auth_headers).
        router = _spawn("pd-router", argv, _env(OPENAI_API_KEY=fleet.key), fleet.work / "pd",
                        f"http://127.0.0.1:{port}")
        procs.append(router)
        wait_up(router, 60)

        good = {"Authorization": f"Bearer {fleet.key}"}
        hits_before = metric(decode.url, "vllm:external_prefix_cache_hits_total", fleet.key)
        answers = []
        for prompt in PROMPTS:
            body = {"model": SERVED, "prompt": prompt, "max_tokens": 12, "temperature": 0,
                    "ignore_eos": True}
            # The PD router authenticates no client: no key here.
            pd = httpx.post(f"{router.url}/v1/completions", json=body, timeout=120,
                            trust_env=False)
            assert pd.status_code == 200, pd.text
            colocated = httpx.post(f"{fleet.a.url}/v1/completions", json=body, headers=good,
                                   timeout=120, trust_env=False).json()
            answers.append((pd.json()["choices"][0]["text"], colocated["choices"][0]["text"]))
            assert pd.json()["usage"]["completion_tokens"] == 12
        assert all(p == c for p, c in answers), answers

        decode_log = decode.log.read_text(encoding="utf-8", errors="replace")
        prefill_log = prefill.log.read_text(encoding="utf-8", errors="replace")
        injected = [line.split("] ", 1)[-1] for line in decode_log.splitlines()
                    if "Inject KV cache of" in line]
        hits = metric(decode.url, "vllm:external_prefix_cache_hits_total", fleet.key)
        print(f"\nPD: {len(PROMPTS)} prompts through the router; decode: "
              f"{decode_log.count('External Cache Hit!')} x 'External Cache Hit!', {injected}, "
              f"vllm:external_prefix_cache_hits_total +{hits - hits_before:g}; "
              f"'attn_metadata is None' warnings: prefill "
              f"{prefill_log.count('attn_metadata is None')}, decode "
              f"{decode_log.count('attn_metadata is None')}")
        assert injected == ["Inject KV cache of 352 tokens to the paged memory"] * len(PROMPTS)
        assert hits - hits_before == 352 * len(PROMPTS)
        assert "Inject KV cache of" not in prefill_log  # the producer loads nothing
        stored = sorted(kv_dir.glob("*/*.safetensors"))
        assert len(stored) == 2 * len(PROMPTS)  # one file per attention layer and prompt

        # The consumer's answer depends on the files: overwrite them, ask it again directly.
        body = {"model": SERVED, "prompt": PROMPTS[0], "max_tokens": 12, "temperature": 0,
                "ignore_eos": True}
        again = httpx.post(f"{decode.url}/v1/completions", json=body, headers=good, timeout=120,
                           trust_env=False).json()["choices"][0]["text"]
        assert again == answers[0][0]
        torch = pytest.importorskip("torch")
        safetensors_torch = pytest.importorskip("safetensors.torch")
        generator = torch.Generator().manual_seed(0)
        for path in stored:
            tensor = safetensors_torch.load_file(str(path))["kv_cache"]
            noise = torch.randn(tensor.shape, generator=generator, dtype=tensor.dtype) * 10
            safetensors_torch.save_file({"kv_cache": noise}, str(path))
        corrupted = httpx.post(f"{decode.url}/v1/completions", json=body, headers=good,
                               timeout=120, trust_env=False).json()["choices"][0]["text"]
        print(f"decode's answer from the stored KV {again!r}, from overwritten KV {corrupted!r}")
        assert corrupted != again
    finally:
        for proc in reversed(procs):
            stop(proc)


def test_a_replica_killed_mid_bench_fails_no_unstreamed_request(fleet: Fleet,
                                                                  tmp_path: Path) -> None:
    client = openai.OpenAI(base_url=f"{fleet.router.url}/v1", api_key=fleet.key, max_retries=0,
                           timeout=120, http_client=openai.DefaultHttpx2Client(trust_env=False))
    bench = _bench(fleet, num_prompts=24, concurrency=2, output_len=16, tmp=tmp_path)
    failures: list[str] = []

    def unstreamed(i: int) -> None:
        try:
            _chat(client, f"question {i} " * 4)
        except openai.OpenAIError as exc:
            failures.append(repr(exc))

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(unstreamed, i) for i in range(40)]
        deadline = time.monotonic() + 120
        while (running := metric(fleet.b.url, "vllm:num_requests_running", fleet.key)) < 1:
            assert time.monotonic() < deadline, "b never ran a request"
            time.sleep(0.05)
        os.killpg(fleet.b.proc.pid, signal.SIGKILL)
        fleet.b.proc.wait(timeout=30)
        for future in futures:
            future.result()
    output, _ = bench.communicate(timeout=300)
    assert bench.returncode == 0, output[-3000:]
    data = json.loads((tmp_path / "bench.json").read_text(encoding="utf-8"))
    metrics = httpx.get(f"{fleet.metrics_url}/metrics", timeout=10, trust_env=False).text
    opened = metric(fleet.metrics_url, "vllm_router_cb_state_transitions_total",
                    worker=fleet.b.url, to="open")
    retries = metric(fleet.metrics_url, "vllm_router_retries_total")
    print(f"\nkilled b with vllm:num_requests_running {running:g}: unstreamed 40 sent, "
          f"{len(failures)} failed; vllm bench serve (streamed) {data['completed']} completed, "
          f"{data['failed']} failed (cut); router retries {retries:g}, breaker opened "
          f"{opened:g} time(s)")
    assert failures == []
    assert data["completed"] + data["failed"] == 24
    assert opened >= 1, metrics[-3000:]
    assert metric(fleet.metrics_url, "vllm_router_worker_health", worker=fleet.b.url) == 0


# --- the rendered PD commands, parsed by vLLM's own argument parser ---------------------------

def test_rendered_pd_commands_parse_with_vllms_parser(tmp_path: Path) -> None:
    extra = {"prefill": {"dp_size": 4, "tp_size": 4}, "decode": {"dp_size": 16, "tp_size": 1}}
    engines = [
        PdEngine("p", "prefill", 36000, 4, 4, (PdNode("10.0.0.1", 16, 0, 4, 7100),), extra,
                 engine_id="0", connector="MooncakeHybridConnector"),
        PdEngine("d", "decode", 36100, 16, 1, (PdNode("10.0.0.2", 16, 0, 16, 7100),), extra,
                 engine_id="1", connector="MooncakeHybridConnector"),
    ]
    prefill, decode = pd_router_workers(engines)
    assert len(prefill) == 4 and len(decode) == 16
    model = tmp_path / "DeepSeek-V4-Flash"  # a local directory: vLLM then asks no hub
    model.mkdir()
    commands = [vllm_serve_argv(e, e.nodes[0], i, model=str(model),
                                dp_address=e.nodes[0].host, dp_rpc_port=12321)
                for e in engines for i in (0, e.nodes[0].dp_size_local - 1)]
    parsed = parse_serve_commands(commands)
    assert [(p["port"], p["dp"], p["dp_rank"], p["tp"]) for p in parsed] == [
        (7100, 4, 0, 4), (7103, 4, 3, 4), (7100, 16, 0, 1), (7115, 16, 15, 1)]
    assert [(p["kv_role"], p["kv_port"], p["engine_id"]) for p in parsed] == [
        ("kv_producer", 36000, "0"), ("kv_producer", 36000, "0"),
        ("kv_consumer", 36100, "1"), ("kv_consumer", 36100, "1")]
    assert {p["kv_connector"] for p in parsed} == {"MooncakeHybridConnector"}
    assert all(p["extra"] == extra for p in parsed)
