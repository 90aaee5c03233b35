"""``ascend-serve bench``'s load generator: streaming requests to an OpenAI-compatible server.

Requests go out on at most ``concurrency`` keep-alive connections (each an
``httpx.AsyncClient`` of one connection, lent to one request at a time) with ``stream: true``
and ``stream_options.include_usage``, to ``/v1/completions`` or ``/v1/chat/completions``; each
server-sent event is read with :func:`validate.parse_sse` and timed with ``time.perf_counter``
(see :mod:`ascend_serve.bench.metrics` for the definitions). Request bodies are encoded before
the clock starts, so the client does little per chunk (``bench/client_ceiling.py`` measures
what it sustains).

Load shapes: at most ``max_concurrency`` requests in flight (None: no cap), arriving at
``request_rate`` requests/s (``inf``: all at once) with Poisson (exponential gaps) or constant
spacing. ``warmup`` requests are sent first and left out of the metrics (the server's own
counters include them).

Python API (what ``ascend-serve tune`` uses)::

    from ascend_serve.bench.runner import BenchConfig, run_benchmark, evaluate
    from ascend_serve.bench import slo

    config = BenchConfig(url="http://127.0.0.1:8000", max_concurrency=8, num_prompts=64,
                         input_len=128, output_len=64, slo=slo.PRESETS["tiny-cpu"])
    result = run_benchmark(config)              # BenchResult (errors: see below)
    result.metrics["output_throughput"]         # every vLLM field; result.headline(): scalars
    result.verdict                              # slo.Verdict when config.slo is set:
    result.verdict.passed, result.verdict.lines()   # overall, and one line per target
    evaluate(result, other_slo, cards=4)        # the same check against another SLO
    result.to_json_dict()                       # the saved JSON (vLLM names + config/slo/...)

    results = run_sweep(config, [1, 2, 4, 8])   # one BenchResult per concurrency, one prompt set

Errors: :class:`BenchConfigError` (bad settings, no tokenizer, prompts that do not fit the
server: nothing measured; exit 2 on the command line), :class:`BenchUnreachableError` (no answer
from the server; exit 3), :class:`BenchError` (the warm-up failed; exit 3).

Telemetry (``telemetry=True``): the measured phase of each run is wrapped with the
``npu-smi`` sampler of :mod:`ascend_serve.bench.telemetry` of *this* host (run bench on the serving
node) or, without npu-smi, the host's energy meter (:func:`ascend_serve.bench.energy.host_meter`:
RAPL, hwmon or IPMI); its report and the tokens per joule (:func:`energy.tokens_per_joule`)
go under ``telemetry`` in the result, or why nothing was measured. ``BenchResult.cost`` (set by
the caller from prices, :mod:`ascend_serve.bench.cost`) goes under ``cost``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import ipaddress
import json
import math
import socket
import ssl
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
import numpy as np

from ansible_collections.ascend_serve.fleet.plugins.module_utils.validate_wire import (
    CheckError,
    base_url,
    parse_sse,
    url_error,
)
from ascend_serve.bench import energy
from ascend_serve.bench import metrics as benchmetrics
from ascend_serve.bench.metrics import DEFAULT_PERCENTILES, RequestRecord
from ascend_serve.bench.prompts import (
    DEFAULT_MAX_OUTPUT_LEN,
    Prompt,
    PromptError,
    Tokenizer,
    dataset_prompts,
    load_tokenizer,
    random_prompts,
    read_dataset,
)
from ascend_serve.bench.slo import Slo, Verdict, evaluate
from ascend_serve.bench.telemetry import TelemetrySampler, sampler_for

# httpcore asks ``import sniffio`` for every lock it sets up (several per request) and falls back
# to asyncio when that fails; Python does not remember a failed import, so without sniffio each
# attempt searches sys.path again: a quarter of the client's time per request. A None entry in
# sys.modules makes the attempt fail at once (only done when sniffio is not installed).
if importlib.util.find_spec("sniffio") is None:
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]

__all__ = ["BenchConfig", "BenchConfigError", "BenchError", "BenchResult", "BenchUnreachableError",
           "ServerInfo", "evaluate", "run_benchmark", "run_sweep"]

Endpoint = Literal["completions", "chat"]
Arrival = Literal["poisson", "constant"]
ENDPOINTS: dict[str, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
# ``vllm bench serve --backend`` names of the two endpoints (its JSON's endpoint_type).
VLLM_BACKENDS: dict[str, str] = {"completions": "openai", "chat": "openai-chat"}

DEFAULT_NUM_PROMPTS = 100
DEFAULT_INPUT_LEN = 256
DEFAULT_OUTPUT_LEN = 128
DEFAULT_WARMUP = 2
DEFAULT_TIMEOUT = 600.0
CONNECT_TIMEOUT = 10.0
MAX_POOL = 1024  # connections when the concurrency is not capped
# Delta fields of a chat chunk that carry a generated token (vLLM's reasoning parser moves the
# reasoning tokens to ``reasoning``, older releases to ``reasoning_content``).
CHAT_TOKEN_FIELDS = ("content", "reasoning", "reasoning_content", "tool_calls")


class BenchError(RuntimeError):
    """The benchmark could not run (the warm-up failed)."""


class BenchUnreachableError(BenchError):
    """The server does not answer (connection refused, DNS, timeout)."""


class BenchConfigError(ValueError):
    """Bad settings; nothing was measured."""


@dataclass(frozen=True)
class BenchConfig:
    """One benchmark run's settings; :meth:`check` says what is wrong before any request."""

    url: str
    model: str | None = None  # the served model name; None: the first of /v1/models
    endpoint: Endpoint = "completions"
    max_concurrency: int | None = None
    request_rate: float = math.inf
    arrival: Arrival = "poisson"
    num_prompts: int = DEFAULT_NUM_PROMPTS
    input_len: int = DEFAULT_INPUT_LEN
    output_len: int | None = None  # None: DEFAULT_OUTPUT_LEN, or the dataset's answer lengths
    tokenizer: str | None = None  # None: the served model's root when it is a local directory
    dataset: str | None = None
    max_output_len: int = DEFAULT_MAX_OUTPUT_LEN  # bound of a dataset answer's length
    warmup: int = DEFAULT_WARMUP
    seed: int = 0
    ignore_eos: bool = True
    api_key: str | None = field(default=None, repr=False)
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    slo: Slo | None = None
    cards: int = 1
    timeout: float = DEFAULT_TIMEOUT
    telemetry: bool = False
    npu_smi: str | None = None
    telemetry_interval_s: float = 1.0
    label: str | None = None

    def check(self) -> None:
        """Raise :class:`BenchConfigError` for settings that cannot run."""
        problem = url_error(self.url)
        if problem:
            raise BenchConfigError(problem)
        if self.endpoint not in ENDPOINTS:
            raise BenchConfigError(f"endpoint must be one of {', '.join(ENDPOINTS)}, "
                                   f"not {self.endpoint!r}")
        if self.arrival not in ("poisson", "constant"):
            raise BenchConfigError(f"arrival must be poisson or constant, not {self.arrival!r}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise BenchConfigError(f"concurrency must be at least 1, not {self.max_concurrency}")
        if math.isnan(self.request_rate) or self.request_rate <= 0:
            raise BenchConfigError(f"request rate must be > 0 (inf: all at once), not "
                                   f"{self.request_rate}")
        for name in ("num_prompts", "input_len", "cards", "max_output_len"):
            if getattr(self, name) < 1:
                raise BenchConfigError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.output_len is not None and self.output_len < 1:
            raise BenchConfigError(f"output_len must be at least 1, not {self.output_len}")
        if self.warmup < 0:
            raise BenchConfigError(f"warmup must be >= 0, not {self.warmup}")
        if not self.timeout > 0:
            raise BenchConfigError(f"timeout must be positive, not {self.timeout}")
        if not self.telemetry_interval_s > 0:
            raise BenchConfigError("the telemetry interval must be positive")
        if not self.percentiles or any(not 0 <= p <= 100 for p in self.percentiles):
            raise BenchConfigError(f"percentiles must be within 0..100: {self.percentiles}")
        if self.dataset is not None and not Path(self.dataset).expanduser().is_file():
            raise BenchConfigError(f"dataset file {self.dataset} does not exist")
        if self.tokenizer is not None and not Path(self.tokenizer).expanduser().exists():
            raise BenchConfigError(f"tokenizer path {self.tokenizer} does not exist")

    def all_percentiles(self) -> list[float]:
        """The asked percentiles and those the SLO's targets need."""
        extra = self.slo.percentiles() if self.slo is not None else set()
        return sorted({*self.percentiles, *extra})

    def to_dict(self) -> dict[str, Any]:
        """The settings for the result file (the API key only as whether one was sent)."""
        data = asdict(self)
        data["api_key"] = bool(self.api_key)
        data["request_rate"] = "inf" if math.isinf(self.request_rate) else self.request_rate
        data["slo"] = self.slo.name if self.slo is not None else None
        data["percentiles"] = list(self.percentiles)
        return data


@dataclass(frozen=True)
class ServerInfo:
    """What ``/v1/models`` says about the served model."""

    model: str
    root: str | None
    max_model_len: int | None


@dataclass
class BenchResult:
    """One run: the metrics under vLLM's names, the per-request records, the SLO verdict."""

    config: BenchConfig
    server: ServerInfo
    tokenizer_id: str
    metrics: dict[str, Any]
    records: list[RequestRecord]
    verdict: Verdict | None = None
    telemetry: dict[str, Any] | None = None
    warmup_records: list[RequestRecord] = field(default_factory=list)
    cost: dict[str, Any] | None = None
    date: str = field(default_factory=lambda: datetime.now().strftime("%Y%m%d-%H%M%S"))

    @property
    def completed(self) -> int:
        return int(self.metrics["completed"])

    @property
    def failed(self) -> int:
        return int(self.metrics["failed"])

    @property
    def duration(self) -> float:
        return float(self.metrics["duration"])

    @property
    def request_throughput(self) -> float:
        return float(self.metrics["request_throughput"])

    @property
    def output_throughput(self) -> float:
        return float(self.metrics["output_throughput"])

    @property
    def total_token_throughput(self) -> float:
        return float(self.metrics["total_token_throughput"])

    def headline(self) -> dict[str, float]:
        """The scalar metrics (no per-request arrays)."""
        return benchmetrics.headline(self.metrics)

    def first_errors(self, limit: int = 3) -> list[str]:
        return [r.error for r in self.records if not r.success][:limit]

    def to_json_dict(self) -> dict[str, Any]:
        """``vllm bench serve --save-result --save-detailed``'s fields, then ours: ``config``,
        ``server``, ``slo`` (the verdict), ``telemetry``, ``cost``, ``warmup``."""
        cfg = self.config
        backend = VLLM_BACKENDS[cfg.endpoint]
        out: dict[str, Any] = {
            "date": self.date,
            "endpoint_type": backend,
            "backend": backend,
            "label": cfg.label,
            "model_id": self.server.model,
            "tokenizer_id": self.tokenizer_id,
            "num_prompts": cfg.num_prompts,
            "request_rate": "inf" if math.isinf(cfg.request_rate) else cfg.request_rate,
            "burstiness": 1.0 if cfg.arrival == "poisson" else "inf",
            "max_concurrency": cfg.max_concurrency,
        }
        out.update(self.metrics)
        out["generated_texts"] = []  # not kept: the client does no text work per chunk
        out["rtfx"] = 0.0  # vLLM's audio (ASR) figure
        out["config"] = cfg.to_dict()
        out["server"] = asdict(self.server)
        out["slo"] = self.verdict.to_dict() if self.verdict is not None else None
        out["telemetry"] = self.telemetry
        out["cost"] = self.cost
        done = [r for r in self.warmup_records if r.success]
        out["warmup"] = {"requests": len(self.warmup_records), "completed": len(done),
                         "prompt_tokens": sum(r.prompt_len for r in done),
                         "output_tokens": sum(r.output_len for r in done),
                         "errors": [r.error for r in self.warmup_records if not r.success]}
        return out


# ---------------------------------------------------------------------------------------------
# Pieces


def arrival_offsets(n: int, rate: float, arrival: Arrival, seed: int = 0) -> list[float]:
    """Seconds after the start at which each of ``n`` requests is sent."""
    if math.isinf(rate):
        return [0.0] * n
    if arrival == "constant":
        return [i / rate for i in range(n)]
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n)
    gaps[0] = 0.0
    return [float(x) for x in np.cumsum(gaps)]


def is_local_host(url: str) -> bool:
    """Whether ``url`` points at this machine (loopback, or this host's own name)."""
    host = urlsplit(url).hostname or ""
    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def request_body(config: BenchConfig, model: str, prompt: Prompt) -> bytes:
    body: dict[str, Any] = {"model": model, "stream": True,
                            "stream_options": {"include_usage": True}}
    if config.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt.text}]
        body["max_completion_tokens"] = prompt.output_len
    else:
        body["prompt"] = prompt.text
        body["max_tokens"] = prompt.output_len
    if config.ignore_eos:
        body["ignore_eos"] = True
    return json.dumps(body).encode()


def _is_token_chunk(choice: dict[str, Any], chat: bool) -> bool:
    """A chunk that carries a generated token (vLLM streams one per token, maybe empty text
    for a special token); the chat stream's opening role announcement does not."""
    if not chat:
        return "text" in choice
    delta = choice.get("delta") or {}
    if "role" in delta and not any(delta.get(k) for k in CHAT_TOKEN_FIELDS):
        return False
    return any(k in delta for k in CHAT_TOKEN_FIELDS)


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("message") or error)[:200]
        return str(error)[:200]
    return str(body)[:200]


class _Client:
    """The HTTP side: connections, headers, the streaming request function.

    Each connection is an ``httpx.AsyncClient`` of one keep-alive connection, lent to one
    request at a time: httpcore's shared pool scans every connection for every request it
    assigns, which costs more than the request itself at high concurrency.
    """

    def __init__(self, config: BenchConfig, pool: int) -> None:
        self.base = base_url(config.url)
        self.chat = config.endpoint == "chat"
        self.url = self.base + ENDPOINTS[config.endpoint]
        self.headers = {"Content-Type": "application/json"}
        if config.api_key:
            self.headers["Authorization"] = f"Bearer {config.api_key}"
        self.size = pool
        self._timeout = httpx.Timeout(config.timeout,
                                      connect=min(config.timeout, CONNECT_TIMEOUT))
        self._tls = ssl.create_default_context()  # one for all: each costs ~20 ms to make
        self._idle: list[httpx.AsyncClient] = []
        self._all: list[httpx.AsyncClient] = []
        self._free: asyncio.Semaphore | None = None

    def _new(self, connections: int = 1) -> httpx.AsyncClient:
        client = httpx.AsyncClient(
            timeout=self._timeout, verify=self._tls, trust_env=False,
            limits=httpx.Limits(max_connections=connections,
                                max_keepalive_connections=connections))
        self._all.append(client)
        return client

    async def close(self) -> None:
        for client in self._all:
            await client.aclose()

    async def models(self) -> list[dict[str, Any]]:
        where = f"GET {self.base}/v1/models"
        try:
            async with self._new() as http:
                response = await http.get(self.base + "/v1/models", headers=self.headers)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise BenchUnreachableError(
                f"{where}: cannot connect ({exc or type(exc).__name__}); is the server running "
                "and listening there?") from exc
        except httpx.HTTPError as exc:
            raise BenchUnreachableError(f"{where}: {type(exc).__name__}: {exc}") from exc
        if response.status_code == 401:
            raise BenchError(f"{where}: 401 Unauthorized: the API key is missing or wrong "
                             "(--api-key / VLLM_API_KEY)")
        if response.status_code != 200:
            raise BenchError(f"{where}: HTTP {response.status_code}: "
                             f"{_error_message(response)}")
        try:
            data = response.json()["data"]
        except (ValueError, KeyError, TypeError) as exc:
            raise BenchError(f"{where}: not an OpenAI model list: {response.text[:120]!r}") \
                from exc
        return [m for m in data if isinstance(m, dict)]

    async def send(self, body: bytes, prompt_len: int, record: RequestRecord) -> None:
        """Send one request on an idle connection, filling ``record`` (never raises but for
        cancellation); waits for a connection when all ``size`` are busy."""
        if self._free is None:
            self._free = asyncio.Semaphore(self.size)
        async with self._free:
            http = self._idle.pop() if self._idle else self._new()
            try:
                await self._send(http, body, prompt_len, record)
            finally:
                self._idle.append(http)

    async def _send(self, http: httpx.AsyncClient, body: bytes, prompt_len: int,
                    record: RequestRecord) -> None:
        record.prompt_len = prompt_len
        chat = self.chat
        pending = b""
        usage: Any = None
        chunks = 0
        start = time.perf_counter()
        last = start
        record.start_time = start
        try:
            async with http.stream("POST", self.url, content=body,
                                   headers=self.headers) as response:
                if response.status_code != 200:
                    await response.aread()
                    record.error = f"HTTP {response.status_code}: {_error_message(response)}"
                    return
                async for data in response.aiter_raw():
                    now = time.perf_counter()
                    pending += data
                    if b"\n\n" not in pending:
                        continue
                    *complete, pending = pending.replace(b"\r\n", b"\n").split(b"\n\n")
                    for raw in complete:
                        for event in parse_sse(raw.decode().split("\n")).events:
                            choices = event.get("choices")
                            if choices and _is_token_chunk(choices[0], chat):
                                if chunks:
                                    record.itl.append(now - last)
                                else:
                                    record.ttft = now - start
                                last = now
                                chunks += 1
                            if event.get("usage"):
                                usage = event["usage"]
                if pending.strip():
                    parse_sse(pending.decode().split("\n"))  # a last event without its blank
        except CheckError as exc:
            record.error = str(exc)
            return
        except httpx.HTTPError as exc:
            record.error = f"{type(exc).__name__}: {exc}"[:300]
            return
        except UnicodeDecodeError as exc:
            record.error = f"the stream is not UTF-8: {exc}"
            return
        if not chunks:
            record.error = "the stream carried no token"
            return
        record.latency = last - start
        record.output_len = chunks
        if isinstance(usage, dict):
            if isinstance(usage.get("completion_tokens"), int):
                record.output_len = usage["completion_tokens"]
            if isinstance(usage.get("prompt_tokens"), int):
                record.prompt_len = usage["prompt_tokens"]
        record.success = True


# ---------------------------------------------------------------------------------------------
# Running


Progress = Callable[[RequestRecord], None]


@dataclass
class _Prepared:
    server: ServerInfo
    tokenizer_id: str
    prompts: list[Prompt]


def _pick_server(models: list[dict[str, Any]], wanted: str | None, url: str) -> ServerInfo:
    if not models:
        raise BenchError(f"{base_url(url)}/v1/models lists no model")
    chosen = models[0]
    if wanted is not None:
        names = [str(m.get("id")) for m in models]
        if wanted not in names:
            raise BenchConfigError(f"the server does not serve {wanted!r} (it serves "
                                   f"{', '.join(names)})")
        chosen = models[names.index(wanted)]
    root = chosen.get("root")
    max_len = chosen.get("max_model_len")
    return ServerInfo(model=str(chosen.get("id")), root=root if isinstance(root, str) else None,
                      max_model_len=max_len if isinstance(max_len, int) else None)


def _tokenizer(config: BenchConfig, server: ServerInfo) -> Tokenizer:
    if config.tokenizer is not None:
        path = config.tokenizer
    elif server.root and is_local_host(config.url) and Path(server.root).is_dir():
        path = server.root
    else:
        served = f" (it serves {server.root})" if server.root else ""
        raise BenchConfigError(
            f"no tokenizer to make prompts with: pass --tokenizer PATH, a local directory with "
            f"the model's tokenizer{served}; nothing is downloaded")
    try:
        return load_tokenizer(path)
    except PromptError as exc:
        raise BenchConfigError(str(exc)) from exc


def _prompts(config: BenchConfig, server: ServerInfo, tokenizer: Tokenizer) -> list[Prompt]:
    limit = server.max_model_len
    try:
        if config.dataset is not None:
            return dataset_prompts(read_dataset(config.dataset), tokenizer, config.num_prompts,
                                   seed=config.seed, output_len=config.output_len,
                                   max_output_len=config.max_output_len, max_total_len=limit)
        output_len = config.output_len or DEFAULT_OUTPUT_LEN
        if limit is not None and config.input_len + output_len > limit:
            raise BenchConfigError(
                f"input {config.input_len} + output {output_len} tokens exceed the server's "
                f"max_model_len {limit}: lower --input-len/--output-len")
        return random_prompts(tokenizer, config.num_prompts, config.input_len, output_len,
                              seed=config.seed)
    except PromptError as exc:
        raise BenchConfigError(str(exc)) from exc


async def _prepare(client: _Client, config: BenchConfig) -> _Prepared:
    server = _pick_server(await client.models(), config.model, config.url)
    tokenizer = _tokenizer(config, server)
    return _Prepared(server, tokenizer.name, _prompts(config, server, tokenizer))


async def _warmup(client: _Client, config: BenchConfig,
                  prepared: _Prepared) -> list[RequestRecord]:
    if config.warmup == 0:
        return []
    prompts = prepared.prompts
    slots = asyncio.Semaphore(min(config.warmup, config.max_concurrency or config.warmup))
    records = [RequestRecord() for _ in range(config.warmup)]

    async def one(i: int) -> None:
        prompt = prompts[i % len(prompts)]
        async with slots:
            await client.send(request_body(config, prepared.server.model, prompt),
                              prompt.prompt_len, records[i])

    await asyncio.gather(*(one(i) for i in range(config.warmup)))
    errors = [r.error for r in records if not r.success]
    if len(errors) == len(records):
        raise BenchError(f"every warm-up request failed; the first: {errors[0]}")
    return records


async def _measure(client: _Client, config: BenchConfig, prepared: _Prepared,
                   progress: Progress | None) -> tuple[list[RequestRecord], float]:
    bodies = [request_body(config, prepared.server.model, p) for p in prepared.prompts]
    lens = [p.prompt_len for p in prepared.prompts]
    offsets = arrival_offsets(len(bodies), config.request_rate, config.arrival, config.seed)
    records = [RequestRecord() for _ in bodies]
    slots: asyncio.Semaphore | None = (asyncio.Semaphore(config.max_concurrency)
                                       if config.max_concurrency else None)

    async def one(i: int, arrived: float) -> None:
        record = records[i]
        if slots is None:
            await client.send(bodies[i], lens[i], record)
        else:
            async with slots:
                record.queue_time = time.perf_counter() - arrived
                await client.send(bodies[i], lens[i], record)
        if progress is not None:
            progress(record)

    tasks = []
    start = time.perf_counter()
    for i, offset in enumerate(offsets):
        if offset > 0:
            wait = start + offset - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
        tasks.append(asyncio.create_task(one(i, time.perf_counter())))
    await asyncio.gather(*tasks)
    return records, time.perf_counter() - start


def _telemetry_sampler(config: BenchConfig) -> TelemetrySampler | energy.Probe | None:
    """The npu-smi sampler for one run; without npu-smi, the host's energy probe (a meter, or
    why there is none); None when no telemetry is asked."""
    if not config.telemetry:
        return None
    sampler = sampler_for(config.npu_smi, config.telemetry_interval_s)
    if sampler is not None:
        return sampler
    return energy.host_meter(config.telemetry_interval_s)


def _telemetry(sampler: TelemetrySampler | energy.Probe, output_tokens: int) -> dict[str, Any]:
    if isinstance(sampler, TelemetrySampler):
        report = sampler.report()
        return {"available": True, **report.to_dict(),
                "tokens_per_joule": energy.tokens_per_joule(output_tokens, report.energy_j)}
    if sampler.meter is None:
        return {"available": False,
                "reason": f"no npu-smi found on this host; {sampler.reason}"}
    host = sampler.meter.report()
    return {"available": True, **host.to_dict(),
            "tokens_per_joule": energy.tokens_per_joule(output_tokens, host.energy_j)}


async def _run_one(client: _Client, config: BenchConfig, prepared: _Prepared,
                   progress: Progress | None) -> BenchResult:
    warmup = await _warmup(client, config, prepared)
    sampler = _telemetry_sampler(config)
    meter: contextlib.AbstractContextManager[Any] = (
        sampler if isinstance(sampler, TelemetrySampler) else
        sampler.meter if sampler is not None and sampler.meter is not None else
        contextlib.nullcontext())
    with meter:
        records, duration = await _measure(client, config, prepared, progress)
    goodput = (dict(config.slo.per_request_ms)
               if config.slo is not None and config.slo.per_request_ms else None)
    metrics = benchmetrics.compute(records, duration, config.all_percentiles(), goodput)
    telemetry = (_telemetry(sampler, metrics["total_output_tokens"])
                 if sampler is not None else None)
    verdict = evaluate(metrics, config.slo, config.cards) if config.slo is not None else None
    return BenchResult(config=config, server=prepared.server, tokenizer_id=prepared.tokenizer_id,
                       metrics=metrics, records=records, verdict=verdict, telemetry=telemetry,
                       warmup_records=warmup)


async def run_sweep_async(config: BenchConfig, concurrencies: Sequence[int | None],
                          progress: Progress | None = None,
                          on_start: Callable[[BenchConfig], None] | None = None
                          ) -> list[BenchResult]:
    """One run per concurrency (``None``: no cap) with the same prompts; see the module doc."""
    runs = [replace(config, max_concurrency=c) for c in concurrencies] or [config]
    for run in runs:
        run.check()
    caps = [run.max_concurrency for run in runs]
    pool = (min(config.num_prompts, MAX_POOL) if None in caps
            else max(c for c in caps if c is not None))
    client = _Client(config, max(pool, config.warmup, 1))
    try:
        prepared = await _prepare(client, config)
        results = []
        for run in runs:
            if on_start is not None:
                on_start(run)
            results.append(await _run_one(client, run, prepared, progress))
        return results
    finally:
        await client.close()


def run_sweep(config: BenchConfig, concurrencies: Sequence[int | None],
              progress: Progress | None = None,
              on_start: Callable[[BenchConfig], None] | None = None) -> list[BenchResult]:
    """Synchronous :func:`run_sweep_async`."""
    return asyncio.run(run_sweep_async(config, concurrencies, progress, on_start))


def run_benchmark(config: BenchConfig, progress: Progress | None = None) -> BenchResult:
    """Run one benchmark (``config.max_concurrency``) and return its result."""
    return run_sweep(config, [config.max_concurrency], progress)[0]
