"""Validate a running OpenAI-compatible vLLM server: health, models, auth, completions, tools,
metrics.

A single file that needs only the standard library and ``httpx`` (which every vLLM environment
has): the ``ascend-serve validate`` command imports it, and an Ansible role copies it to a serving
node and runs it there with the node's vLLM interpreter::

    python validate.py http://127.0.0.1:8000 --reasoning --tools --json

Exit codes: 0 every check passed, 1 a check failed, 2 bad arguments (nothing was checked).

The checks, in order (each one records its own failure and the next one still runs where it
can): ``health``, ``models``, ``auth`` (only with an API key), ``completion``,
``completion-stream``, ``chat``, ``chat-stream``, ``max-tokens``, ``reasoning`` (only when asked),
``tools-auto``, ``tools-none``, ``tools-named``, ``tools-named-stream`` (only with ``--tools``),
``metrics``, ``concurrency``. Generation requests send vLLM's ``ignore_eos`` so that the number of
completion tokens is exactly ``max_tokens``, and every answer's ``usage`` must add up.

The tool checks offer two small functions (:data:`TOOLS`) and check that tool_choice "auto" is
accepted and answered with content or well-formed tool calls, that "none" gets no tool calls, and
that a named function is called (plain and streamed) with arguments that satisfy its schema.
vLLM constrains a named (or "required") call to the model's own tool-call syntax and parses it
with the server's tool-call parser, so even a small model answers with a real call.

The API key is sent as ``Authorization: Bearer …`` and never printed: every detail is redacted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

EXIT_OK, EXIT_CHECK_FAILED, EXIT_BAD_INPUT = 0, 1, 2

DEFAULT_API_KEY_ENV = "VLLM_API_KEY"
DEFAULT_CONCURRENCY = 8
DEFAULT_MAX_TOKENS = 16
DEFAULT_TIMEOUT = 120.0
MAX_CONCURRENCY = 256

TOOL_CHECK_NAMES = ("tools-auto", "tools-none", "tools-named", "tools-named-stream")
CHECK_NAMES = ("health", "models", "auth", "completion", "completion-stream", "chat",
               "chat-stream", "max-tokens", "reasoning", *TOOL_CHECK_NAMES, "metrics",
               "concurrency")

# The metric families every vLLM (V1 engine) server exposes; the counter is read before and after.
RUNNING_METRIC = "vllm:num_requests_running"
TTFT_METRIC = "vllm:time_to_first_token_seconds"
GENERATION_TOKENS_METRIC = "vllm:generation_tokens"
# Where a chat answer carries the reasoning parser's output: vLLM >= 0.10 says "reasoning",
# older releases said "reasoning_content".
REASONING_FIELDS = ("reasoning", "reasoning_content")

PROMPT = "The capital of France is"
CHAT_MESSAGES = [{"role": "user", "content": "What is 1 + 1? Answer briefly."}]
# Seconds to wait for /metrics to catch up with the answers already received.
METRICS_SETTLE_S = 5.0

# The functions the tool checks offer: small strict schemas (one enum parameter each), so a call
# is a few tokens and its arguments can be checked against the schema.
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather in a city",
        "parameters": {"type": "object",
                       "properties": {"unit": {"type": "string",
                                               "enum": ["celsius", "fahrenheit"]}},
                       "required": ["unit"], "additionalProperties": False},
        "strict": True}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Time now",
        "parameters": {"type": "object",
                       "properties": {"zone": {"type": "string", "enum": ["utc", "local"]}},
                       "required": ["zone"], "additionalProperties": False},
        "strict": True}},
]
# The function tools-named and tools-named-stream ask for (not the first offered, so a server
# that calls whatever comes first is caught).
NAMED_TOOL = "get_time"
TOOL_MESSAGES = [{"role": "user", "content": "What time is it? Use a tool."}]
# Tokens for each tool check's answer: a bounded reasoning (below), "</think>" and one call in
# DeepSeek's syntax fit with room to spare (a tiny model's character-level JSON takes about 60
# tokens); prompt + answer also fit the tiny serving profiles' 512-token context.
TOOL_MAX_TOKENS = 96
# With --reasoning, the tool checks bound the thinking with vLLM's ``thinking_token_budget``
# (vLLM 0.32: vllm/entrypoints/openai/chat_completion/protocol.py; a --reasoning-parser sets up
# vllm/config/reasoning.py's ReasoningConfig, whose end string, the parser's "</think>" for
# deepseek_r1, the engine forces after this many reasoning tokens). vLLM applies a tool call's
# grammar only after the reasoning ends (vllm/v1/structured_output/__init__.py,
# _get_constraint_bounds), so unbounded thinking could use up max_tokens before the call starts.
# vLLM 0.32 refuses the field without a reasoning parser (vllm/v1/engine/input_processor.py:
# "thinking_token_budget is set but reasoning_config is not configured"), so it is sent only
# with --reasoning. A release without the field would ignore it, as vLLM does unknown request
# fields (vLLM 0.32: vllm/entrypoints/serve/engine/protocol.py, OpenAIBaseModel: "present in the
# request but ignored"); the thinking is then unbounded (not checked against older releases).
THINKING_TOKEN_BUDGET = 8
# Whitespace that a tokenizer may hold as tokens of their own. A tool call's arguments are
# constrained by the JSON schema but not their whitespace: vLLM's
# --structured-outputs-config disable_any_whitespace applies to JSON-schema outputs only, a tool
# call's structural tag is compiled without it (vLLM 0.32:
# vllm/v1/structured_output/backend_xgrammar.py, compile_grammar), and xgrammar's "deepseek_r1"
# tag sets no whitespace limit (max_whitespace_cnt=None). A small model at temperature 0 can pad
# the JSON with whitespace until max_tokens; the tool checks bias the whitespace-only tokens
# down (logit_bias -100, ids from vLLM's POST /tokenize), so the call is compact JSON. A token
# the grammar requires (the "\n" around DeepSeek's ```json block) is still chosen: the bias only
# reorders the tokens the grammar allows.
WHITESPACE_PIECES = (" ", "  ", "   ", "    ", "\n", "\n\n", "\t", "\r", "\r\n", " \n")
# What vLLM says when a request has tools and the server has no tool-call parser (vLLM 0.32:
# vllm/renderers/online_renderer.py: '"auto" tool choice requires --enable-auto-tool-choice and
# --tool-call-parser to be set', 'tool_choice=... requires --tool-call-parser to be set').
TOOL_PARSER_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser")
TOOL_PARSER_FIX = ("the server has no tool-call parser: set tool_call_parser in the serving "
                   "profile (vLLM --enable-auto-tool-choice --tool-call-parser, deepseek_v3 for "
                   "DeepSeek-V3/R1)")


@dataclass
class Check:
    """One check's outcome."""

    name: str
    ok: bool
    detail: str
    seconds: float


@dataclass
class Report:
    """Every check run against one server."""

    url: str
    served_name: str | None
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(check.ok for check in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "served_name": self.served_name,
            "ok": self.ok,
            "checks": [
                {"name": c.name, "ok": c.ok, "detail": c.detail, "seconds": round(c.seconds, 3)}
                for c in self.checks
            ],
        }


class CheckError(Exception):
    """A check failed; the message is the detail to report."""


@dataclass
class SSEStream:
    """The JSON events of a server-sent event stream, and whether it ended with ``[DONE]``."""

    events: list[dict[str, Any]]
    done: bool


# ---------------------------------------------------------------------------------------------
# Pure helpers (unit-tested with canned data)


def url_error(url: str) -> str | None:
    """Why ``url`` is not a usable server URL (None when it is)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        return f"invalid URL {url!r}: {exc}"
    if parts.scheme not in ("http", "https"):
        return f"invalid URL {url!r}: the scheme must be http or https"
    if not parts.hostname:
        return f"invalid URL {url!r}: no host"
    if parts.query or parts.fragment:
        return f"invalid URL {url!r}: no query or fragment expected"
    return None


def base_url(url: str) -> str:
    """The server root of ``url``: without a trailing slash or ``/v1``."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    path = path.removesuffix("/v1")
    return f"{parts.scheme}://{parts.netloc}{path}"


def parse_sse(lines: Iterable[str]) -> SSEStream:
    """Parse the lines of an OpenAI-style event stream (``data: {json}`` … ``data: [DONE]``).

    Consecutive ``data:`` lines form one event (joined by newlines) until a blank line; comments
    (``:``) and the ``event``/``id``/``retry`` fields are ignored. Raises ``CheckError`` for
    payloads that are not JSON objects, an ``error`` event, or anything after ``[DONE]``.
    """
    events: list[dict[str, Any]] = []
    done = False
    buffer: list[str] = []

    def dispatch() -> None:
        nonlocal done
        if not buffer:
            return
        payload = "\n".join(buffer).strip()
        buffer.clear()
        if done:
            raise CheckError(f"the stream went on after [DONE]: {payload[:120]!r}")
        if payload == "[DONE]":
            done = True
            return
        try:
            event = json.loads(payload)
        except ValueError as exc:
            raise CheckError(f"a stream event is not JSON: {payload[:120]!r}") from exc
        if not isinstance(event, dict):
            raise CheckError(f"a stream event is not a JSON object: {payload[:120]!r}")
        if "error" in event:
            raise CheckError(f"the server sent an error in the stream: {_error_text(event)}")
        events.append(event)

    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            dispatch()
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            buffer.append(value)
        elif name not in ("event", "id", "retry"):
            raise CheckError(f"not a server-sent event line: {line[:120]!r}")
    dispatch()
    return SSEStream(events=events, done=done)


def usage_problems(usage: Any, expected_completion: int | None = None) -> list[str]:
    """What is wrong with an OpenAI ``usage`` object (empty when it is consistent).

    The three counts must be integers, the prompt must have tokens, ``prompt + completion``
    must equal ``total``, and the completion must have ``expected_completion`` tokens when given.
    """
    if not isinstance(usage, dict):
        return [f"no usage object (got {type(usage).__name__})"]
    problems: list[str] = []
    counts: dict[str, int] = {}
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        value = usage.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            problems.append(f"usage.{key} is {value!r}, not a count")
        else:
            counts[key] = value
    if problems:
        return problems
    prompt, completion, total = (counts["prompt_tokens"], counts["completion_tokens"],
                                 counts["total_tokens"])
    if prompt == 0:
        problems.append("usage.prompt_tokens is 0")
    if prompt + completion != total:
        problems.append(f"usage does not add up: {prompt} + {completion} != {total}")
    if expected_completion is not None and completion != expected_completion:
        problems.append(
            f"{completion} completion tokens, expected {expected_completion} (max_tokens with "
            "ignore_eos)")
    return problems


def usage_text(usage: dict[str, Any]) -> str:
    return (f"usage {usage['prompt_tokens']}+{usage['completion_tokens']}"
            f"={usage['total_tokens']}")


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text format → ``{sample name: sum over label sets}``; ``# TYPE`` families too.

    Families declared by ``# TYPE NAME …`` appear with the value 0.0 unless a sample of the same
    name adds to it (histograms expose ``NAME_bucket``/``_sum``/``_count`` samples only).
    """
    samples: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split()
            if len(parts) >= 3 and parts[1] == "TYPE":
                samples.setdefault(parts[2], 0.0)
            continue
        if "{" in line:
            name, _, rest = line.partition("{")
            rest = rest.rpartition("}")[2]
        else:
            name, _, rest = line.partition(" ")
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        samples[name.strip()] = samples.get(name.strip(), 0.0) + value
    return samples


def counter_value(samples: dict[str, float], name: str) -> float | None:
    """A counter's value: the ``NAME_total`` sample (or ``NAME`` itself); None when absent."""
    return samples.get(f"{name}_total", samples.get(name))


def tool_names(tools: list[dict[str, Any]]) -> list[str]:
    return [tool["function"]["name"] for tool in tools]


def tool_parameters(tools: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for tool in tools:
        if tool["function"]["name"] == name:
            parameters: dict[str, Any] = tool["function"]["parameters"]
            return parameters
    raise KeyError(name)


def schema_problems(value: Any, schema: dict[str, Any]) -> list[str]:
    """What is wrong with ``value`` under ``schema``: the subset the checks' :data:`TOOLS` use
    (object with properties, required, additionalProperties false; string; enum)."""
    problems: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{value!r} is not one of {schema['enum']}")
    kind = schema.get("type")
    if kind == "string" and not isinstance(value, str):
        problems.append(f"{value!r} is not a string")
    if kind == "object":
        if not isinstance(value, dict):
            return [f"{value!r:.60} is not an object"]
        properties: dict[str, Any] = schema.get("properties", {})
        missing = [key for key in schema.get("required", []) if key not in value]
        if missing:
            problems.append(f"missing {', '.join(missing)}")
        if schema.get("additionalProperties") is False:
            extra = sorted(key for key in value if key not in properties)
            if extra:
                problems.append(f"unexpected {', '.join(extra)}")
        for key, sub in properties.items():
            if key in value:
                problems += [f"{key}: {p}" for p in schema_problems(value[key], sub)]
    return problems


def tool_call_problems(call: Any, tools: list[dict[str, Any]],
                       expected_name: str | None = None) -> list[str]:
    """What is wrong with one OpenAI ``tool_calls`` entry (empty when it is a well-formed call).

    It needs an ``id``, ``type`` "function", the name of an offered function (``expected_name``
    when given) and ``arguments``: a JSON object that satisfies the function's parameters.
    """
    if not isinstance(call, dict):
        return [f"a tool call is {call!r:.80}, not an object"]
    problems: list[str] = []
    if not isinstance(call.get("id"), str) or not call["id"]:
        problems.append(f"tool call id is {call.get('id')!r}")
    if call.get("type") != "function":
        problems.append(f"tool call type is {call.get('type')!r}, not 'function'")
    function = call.get("function")
    if not isinstance(function, dict):
        return [*problems, f"tool call function is {function!r:.80}"]
    name = function.get("name")
    offered = tool_names(tools)
    if expected_name is not None and name != expected_name:
        problems.append(f"called {name!r}, but tool_choice named {expected_name!r}")
    elif name not in offered:
        problems.append(f"called {name!r}, which is not offered ({', '.join(offered)})")
    raw = function.get("arguments")
    if not isinstance(raw, str):
        return [*problems, f"arguments are {raw!r:.80}, not a JSON string"]
    try:
        arguments = json.loads(raw)
    except ValueError:
        return [*problems, f"arguments are not JSON: {raw[:120]!r}"]
    if not isinstance(arguments, dict):
        return [*problems, f"arguments are not a JSON object: {raw[:120]!r}"]
    if name in offered:
        problems += [f"arguments {raw[:120]}: {p}"
                     for p in schema_problems(arguments, tool_parameters(tools, name))]
    return problems


def assemble_tool_calls(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls a chat stream's ``delta.tool_calls`` pieces add up to, by ``index``.

    The first piece of a call carries its ``id``, ``type`` and the function's ``name``; the
    ``arguments`` (and a name sent in pieces) are concatenated in order.
    """
    calls: dict[int, dict[str, Any]] = {}
    for event in events:
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            for piece in delta.get("tool_calls") or []:
                if not isinstance(piece, dict):
                    raise CheckError(f"a tool_calls delta is {piece!r:.80}")
                index = piece.get("index")
                if isinstance(index, bool) or not isinstance(index, int):
                    raise CheckError(f"a tool_calls delta has no index: {piece!r:.120}")
                call = calls.setdefault(index, {"function": {"name": "", "arguments": ""}})
                for key in ("id", "type"):
                    if piece.get(key):
                        call.setdefault(key, piece[key])
                function = piece.get("function") or {}
                for key in ("name", "arguments"):
                    part = function.get(key)
                    if part is not None and not isinstance(part, str):
                        raise CheckError(f"a tool_calls delta's {key} is {part!r:.60}")
                    call["function"][key] += part or ""
    return [calls[index] for index in sorted(calls)]


def with_tool_parser_fix(message: str) -> str:
    """``message``, with the fix when it is vLLM saying it has no tool-call parser."""
    if any(flag in message for flag in TOOL_PARSER_FLAGS):
        return f"{message}: {TOOL_PARSER_FIX}"
    return message


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced."""
    if secret:
        text = text.replace(secret, "***")
    return text


def _error_text(body: Any) -> str:
    """The message of an OpenAI/vLLM error body (``{"error": …}`` or ``{"message": …}``)."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            message = error.get("message") or error.get("detail") or json.dumps(error)
            return str(message)[:300]
        return str(error)[:300]
    return str(body)[:300]


def _need(condition: bool, message: str) -> None:
    if not condition:
        raise CheckError(message)


# ---------------------------------------------------------------------------------------------
# Talking to the server


class _Server:
    """One httpx client for every check; turns transport errors into clear ``CheckError``s."""

    def __init__(self, url: str, api_key: str | None, timeout: float, pool: int) -> None:
        self.base = base_url(url)
        self.api_key = api_key
        self.timeout = timeout
        self.unreachable = False
        # Completion tokens the server reported in the answers received (for the metrics check).
        self.tokens_received = 0
        self._lock = threading.Lock()
        # No proxies from the environment: this talks to a serving node's own address.
        self.client = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            limits=httpx.Limits(max_connections=pool, max_keepalive_connections=pool),
            trust_env=False,
        )

    def close(self) -> None:
        self.client.close()

    def headers(self, auth: bool | str = True) -> dict[str, str]:
        key = auth if isinstance(auth, str) else (self.api_key if auth else None)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _transport_error(self, method: str, path: str, exc: httpx.HTTPError) -> CheckError:
        where = f"{method} {self.base}{path}"
        if isinstance(exc, httpx.ConnectTimeout):
            self.unreachable = True
            return CheckError(f"{where}: no connection within {min(self.timeout, 10.0):g} s")
        if isinstance(exc, httpx.ConnectError):
            self.unreachable = True
            reason = str(exc) or type(exc).__name__
            if "refused" in reason.lower():
                reason = "connection refused (is the server running and listening there?)"
            return CheckError(f"{where}: cannot connect: {reason}")
        if isinstance(exc, httpx.TimeoutException):
            # A server that cannot even answer /health in time will not answer the rest.
            self.unreachable = self.unreachable or path == "/health"
            return CheckError(f"{where}: no answer within {self.timeout:g} s "
                              f"({type(exc).__name__})")
        if isinstance(exc, httpx.RemoteProtocolError):
            return CheckError(f"{where}: the server broke the connection: {exc}")
        return CheckError(f"{where}: {type(exc).__name__}: {exc}")

    def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                auth: bool | str = True) -> httpx.Response:
        try:
            return self.client.request(method, self.base + path, json=body,
                                       headers=self.headers(auth))
        except httpx.HTTPError as exc:
            raise self._transport_error(method, path, exc) from exc

    def json(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """The JSON answer of a request that must succeed (200)."""
        response = self.request(method, path, body)
        _expect_ok(response, f"{method} {path}")
        try:
            return response.json()
        except ValueError as exc:
            raise CheckError(
                f"{method} {path}: the answer is not JSON: {response.text[:120]!r}") from exc

    @staticmethod
    def _lines(response: httpx.Response) -> Iterator[str]:
        yield from response.iter_lines()

    def stream(self, path: str, body: dict[str, Any]) -> SSEStream:
        """POST ``body`` and parse the event stream of the answer."""
        try:
            with self.client.stream("POST", self.base + path, json=body,
                                    headers=self.headers()) as response:
                if response.status_code != 200:
                    response.read()
                    _expect_ok(response, f"POST {path}")
                content_type = response.headers.get("content-type", "")
                _need(content_type.startswith("text/event-stream"),
                      f"POST {path} (stream): content-type {content_type!r}, "
                      "not text/event-stream")
                return parse_sse(self._lines(response))
        except httpx.HTTPError as exc:
            raise self._transport_error("POST", path, exc) from exc

    def note_usage(self, usage: Any) -> None:
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            with self._lock:
                self.tokens_received += usage["completion_tokens"]

    def metrics(self) -> dict[str, float]:
        response = self.request("GET", "/metrics")
        _expect_ok(response, "GET /metrics")
        return parse_metrics(response.text)


def _assistant_message(answer: dict[str, Any]) -> dict[str, Any]:
    """The one choice's message of a chat answer, checked to be the assistant's."""
    choices = answer.get("choices")
    _need(isinstance(choices, list) and len(choices) == 1,
          f"expected one choice, got {choices!r:.120}")
    assert isinstance(choices, list)
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    _need(isinstance(message, dict), f"choices[0].message is {message!r:.120}")
    assert isinstance(message, dict)
    _need(message.get("role") == "assistant",
          f"message role {message.get('role')!r}, expected 'assistant'")
    return message


def _expect_ok(response: httpx.Response, what: str) -> None:
    if response.status_code == 200:
        return
    if response.status_code == 401:
        raise CheckError(f"{what}: 401 Unauthorized: the API key is missing or wrong "
                         "(--api-key-env / --api-key-file)")
    try:
        message = _error_text(response.json())
    except ValueError:
        message = response.text[:200].strip() or response.reason_phrase
    raise CheckError(f"{what}: HTTP {response.status_code}: {message}")


# ---------------------------------------------------------------------------------------------
# The checks


class _Checks:
    def __init__(self, server: _Server, served_name: str | None, reasoning: bool,
                 concurrency: int, max_tokens: int) -> None:
        self.server = server
        self.model = served_name
        self.reasoning = reasoning
        self.concurrency = concurrency
        self.max_tokens = max_tokens
        self.metrics_before: float | None = None
        self.metrics_before_error = "not read"
        self.chat_message: dict[str, Any] | None = None
        self._whitespace_bias: dict[str, int] | None = None

    # Requests -------------------------------------------------------------------------------

    def _completion_body(self, max_tokens: int, stream: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "prompt": PROMPT, "max_tokens": max_tokens,
                                "temperature": 0, "ignore_eos": True}
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        return body

    def _chat_body(self, max_tokens: int, stream: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": CHAT_MESSAGES,
                                "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        return body

    def _completion(self, max_tokens: int) -> str:
        """One non-streamed completion; returns its summary."""
        answer = self.server.json("POST", "/v1/completions", self._completion_body(max_tokens))
        _need(isinstance(answer, dict), "the completion answer is not a JSON object")
        usage = answer.get("usage")
        self.server.note_usage(usage)
        choices = answer.get("choices")
        _need(isinstance(choices, list) and len(choices) == 1,
              f"expected one choice, got {choices!r:.120}")
        choice = choices[0]
        _need(isinstance(choice, dict) and isinstance(choice.get("text"), str),
              f"choices[0].text is not a string: {choice!r:.120}")
        _need(choice.get("finish_reason") == "length",
              f"finish_reason {choice.get('finish_reason')!r}, expected 'length'")
        problems = usage_problems(usage, max_tokens)
        _need(not problems, "; ".join(problems))
        return f"{max_tokens} tokens, finish_reason length, {usage_text(usage)}"

    # Checks ---------------------------------------------------------------------------------

    def health(self) -> str:
        response = self.server.request("GET", "/health", auth=False)
        _expect_ok(response, "GET /health")
        return "GET /health: 200"

    def models(self) -> str:
        answer = self.server.json("GET", "/v1/models")
        data: Any = answer.get("data") if isinstance(answer, dict) else None
        _need(isinstance(data, list), f"GET /v1/models: no 'data' list in {answer!r:.120}")
        ids: list[str] = [item["id"] for item in data
                          if isinstance(item, dict) and isinstance(item.get("id"), str)]
        _need(bool(ids), "GET /v1/models lists no model")
        listed = ", ".join(ids)
        if self.model is None:
            self.model = ids[0]
            return f"no served name given: using the first listed, {ids[0]!r} (listed: {listed})"
        _need(self.model in ids, f"served name {self.model!r} is not listed (listed: {listed})")
        return f"{self.model!r} listed"

    def auth(self) -> str:
        refused: list[str] = []
        for label, auth in (("without a key", False),
                            ("with a wrong key", f"wrong-{os.urandom(8).hex()}")):
            response = self.server.request("GET", "/v1/models", auth=auth)
            _need(response.status_code == 401,
                  f"GET /v1/models {label}: HTTP {response.status_code}, expected 401 "
                  "(the server does not check the API key)")
            refused.append(label)
        return f"refused {' and '.join(refused)} (401)"

    def completion(self) -> str:
        return self._completion(self.max_tokens)

    def completion_stream(self) -> str:
        stream = self.server.stream("/v1/completions",
                                    self._completion_body(self.max_tokens, stream=True))
        _need(stream.done, "the stream did not end with 'data: [DONE]'")
        text = ""
        finish: Any = None
        usage: Any = None
        for event in stream.events:
            for choice in event.get("choices") or []:
                piece = choice.get("text")
                _need(piece is None or isinstance(piece, str), f"a text chunk is {piece!r:.60}")
                text += piece or ""
                finish = choice.get("finish_reason") or finish
            if event.get("usage") is not None:
                usage = event["usage"]
        self.server.note_usage(usage)
        _need(bool(text), f"{len(stream.events)} events but no text")
        _need(finish == "length", f"finish_reason {finish!r}, expected 'length'")
        problems = usage_problems(usage, self.max_tokens)
        _need(not problems, "final usage: " + "; ".join(problems))
        return (f"{len(stream.events)} events, {len(text)} chars, [DONE], "
                f"{usage_text(usage)}")

    def chat(self) -> str:
        answer = self.server.json("POST", "/v1/chat/completions", self._chat_body(self.max_tokens))
        _need(isinstance(answer, dict), "the chat answer is not a JSON object")
        usage = answer.get("usage")
        self.server.note_usage(usage)
        message = _assistant_message(answer)
        self.chat_message = message
        choices = answer["choices"]
        texts = {key: message.get(key) for key in ("content", *REASONING_FIELDS)}
        for key, value in texts.items():
            _need(value is None or isinstance(value, str), f"message.{key} is {value!r:.60}")
        strings = {key: value for key, value in texts.items() if isinstance(value, str)}
        _need(bool(strings), "the message has neither content nor reasoning")
        _need(choices[0].get("finish_reason") == "length",
              f"finish_reason {choices[0].get('finish_reason')!r}, expected 'length'")
        problems = usage_problems(usage, self.max_tokens)
        _need(not problems, "; ".join(problems))
        parts = ", ".join(f"{key} {len(value)} chars" for key, value in strings.items())
        return f"assistant: {parts}; {usage_text(usage)}"

    def chat_stream(self) -> str:
        stream = self.server.stream("/v1/chat/completions",
                                    self._chat_body(self.max_tokens, stream=True))
        _need(stream.done, "the stream did not end with 'data: [DONE]'")
        roles: set[str] = set()
        text: dict[str, str] = {}
        finish: Any = None
        usage: Any = None
        for event in stream.events:
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                if isinstance(delta.get("role"), str):
                    roles.add(delta["role"])
                for key in ("content", *REASONING_FIELDS):
                    piece = delta.get(key)
                    _need(piece is None or isinstance(piece, str),
                          f"a delta's {key} is {piece!r:.60}")
                    if piece:
                        text[key] = text.get(key, "") + piece
                finish = choice.get("finish_reason") or finish
            if event.get("usage") is not None:
                usage = event["usage"]
        self.server.note_usage(usage)
        _need(roles == {"assistant"}, f"delta roles {sorted(roles)}, expected ['assistant']")
        _need(bool(text), f"{len(stream.events)} events but no content or reasoning")
        _need(finish == "length", f"finish_reason {finish!r}, expected 'length'")
        problems = usage_problems(usage, self.max_tokens)
        _need(not problems, "final usage: " + "; ".join(problems))
        parts = ", ".join(f"{key} {len(value)} chars" for key, value in text.items())
        return f"{len(stream.events)} events, {parts}, [DONE], {usage_text(usage)}"

    # Tool calling ---------------------------------------------------------------------------

    def whitespace_bias(self) -> dict[str, int]:
        """``logit_bias`` against the tokenizer's whitespace-only tokens (see
        :data:`WHITESPACE_PIECES`); empty where the server has no ``/tokenize``."""
        if self._whitespace_bias is None:
            bias: dict[str, int] = {}
            for piece in WHITESPACE_PIECES:
                response = self.server.request("POST", "/tokenize", {
                    "model": self.model, "prompt": piece, "add_special_tokens": False})
                if response.status_code != 200:
                    break
                try:
                    tokens = response.json().get("tokens")
                except (ValueError, AttributeError):
                    break
                if isinstance(tokens, list) and len(tokens) == 1 and isinstance(tokens[0], int):
                    bias[str(tokens[0])] = -100
            self._whitespace_bias = bias
        return self._whitespace_bias

    def _tool_body(self, tool_choice: Any, stream: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": TOOL_MESSAGES, "tools": TOOLS,
                                "tool_choice": tool_choice, "max_tokens": TOOL_MAX_TOKENS,
                                "temperature": 0}
        bias = self.whitespace_bias()
        if bias:
            body["logit_bias"] = bias
        if self.reasoning:
            body["thinking_token_budget"] = THINKING_TOKEN_BUDGET
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        return body

    def _tool_answer(self, tool_choice: Any) -> tuple[dict[str, Any], Any]:
        """POST a chat request with :data:`TOOLS`; the answer's message and finish_reason."""
        try:
            answer = self.server.json("POST", "/v1/chat/completions", self._tool_body(tool_choice))
        except CheckError as exc:
            raise CheckError(with_tool_parser_fix(str(exc))) from exc
        _need(isinstance(answer, dict), "the chat answer is not a JSON object")
        usage = answer.get("usage")
        self.server.note_usage(usage)
        problems = usage_problems(usage)
        _need(not problems, "; ".join(problems))
        message = _assistant_message(answer)
        choices = answer["choices"]
        for key in ("content", *REASONING_FIELDS):
            value = message.get(key)
            _need(value is None or isinstance(value, str), f"message.{key} is {value!r:.60}")
        calls = message.get("tool_calls")
        _need(calls is None or isinstance(calls, list), f"message.tool_calls is {calls!r:.80}")
        return message, choices[0].get("finish_reason")

    def _no_call_hint(self, message: dict[str, Any], finish: Any) -> str:
        reasoning = any(message.get(key) for key in REASONING_FIELDS)
        hint = f"finish_reason {finish!r}"
        if finish == "length":
            hint += f" (max_tokens {TOOL_MAX_TOKENS} reached"
            if reasoning and not message.get("content") and not self.reasoning:
                hint += ("; the answer is all reasoning: with a reasoning parser, pass --reasoning "
                         "so the tool checks bound the thinking")
            hint += ")"
        return hint

    @staticmethod
    def _call_text(call: dict[str, Any]) -> str:
        function = call["function"]
        return f"{function['name']}({function['arguments']})"

    def tools_auto(self) -> str:
        message, finish = self._tool_answer("auto")
        calls = message.get("tool_calls") or []
        problems = [p for call in calls for p in tool_call_problems(call, TOOLS)]
        _need(not problems, "tool_choice 'auto': " + "; ".join(problems))
        if calls:
            return (f"tool_choice 'auto': {len(calls)} tool call(s): "
                    f"{', '.join(self._call_text(c) for c in calls)}")
        content = message.get("content")
        _need(bool(content), "tool_choice 'auto': the answer has neither content nor tool calls, "
                             + self._no_call_hint(message, finish))
        assert isinstance(content, str)
        return f"tool_choice 'auto': accepted, answered with content ({len(content)} chars)"

    def tools_none(self) -> str:
        message, finish = self._tool_answer("none")
        calls = message.get("tool_calls") or []
        _need(not calls, f"tool_choice 'none' was not honoured: {len(calls)} tool call(s) "
                         f"{json.dumps(calls)[:160]}")
        texts = {key: message.get(key) for key in ("content", *REASONING_FIELDS)
                 if message.get(key)}
        _need(bool(texts), f"tool_choice 'none': the answer is empty, finish_reason {finish!r}")
        parts = ", ".join(f"{key} {len(str(value))} chars" for key, value in texts.items())
        return f"tool_choice 'none': no tool calls; {parts}"

    def _named_result(self, calls: list[Any], finish: Any, message: dict[str, Any]) -> str:
        _need(bool(calls), f"tool_choice named {NAMED_TOOL!r}, but the answer has no tool call, "
                           + self._no_call_hint(message, finish))
        _need(len(calls) == 1, f"tool_choice named {NAMED_TOOL!r}, but the answer has "
                               f"{len(calls)} tool calls: {json.dumps(calls)[:200]}")
        problems = tool_call_problems(calls[0], TOOLS, expected_name=NAMED_TOOL)
        _need(not problems, "; ".join(problems))
        # OpenAI: "stop" for a named tool_choice; "tool_calls" is accepted too.
        _need(finish in ("stop", "tool_calls"),
              f"finish_reason {finish!r} after the call, expected 'stop' or 'tool_calls'")
        return f"called {self._call_text(calls[0])}, finish_reason {finish}"

    def tools_named(self) -> str:
        message, finish = self._tool_answer({"type": "function",
                                             "function": {"name": NAMED_TOOL}})
        return self._named_result(message.get("tool_calls") or [], finish, message)

    def tools_named_stream(self) -> str:
        body = self._tool_body({"type": "function", "function": {"name": NAMED_TOOL}},
                               stream=True)
        try:
            stream = self.server.stream("/v1/chat/completions", body)
        except CheckError as exc:
            raise CheckError(with_tool_parser_fix(str(exc))) from exc
        _need(stream.done, "the stream did not end with 'data: [DONE]'")
        finish: Any = None
        usage: Any = None
        text: dict[str, str] = {}
        for event in stream.events:
            for choice in event.get("choices") or []:
                finish = choice.get("finish_reason") or finish
                delta = choice.get("delta") or {}
                for key in ("content", *REASONING_FIELDS):
                    if isinstance(delta.get(key), str):
                        text[key] = text.get(key, "") + delta[key]
            if event.get("usage") is not None:
                usage = event["usage"]
        self.server.note_usage(usage)
        problems = usage_problems(usage)
        _need(not problems, "final usage: " + "; ".join(problems))
        calls = assemble_tool_calls(stream.events)
        pieces = sum(len((choice.get("delta") or {}).get("tool_calls") or [])
                     for event in stream.events for choice in event.get("choices") or [])
        result = self._named_result(calls, finish, text)
        return f"{pieces} tool_calls deltas assemble to: {result}"

    def max_tokens_check(self) -> str:
        small = 3 if self.max_tokens != 3 else 4
        return self._completion(small)

    def reasoning_check(self) -> str:
        message = self.chat_message
        if message is None:  # the chat check got no message: ask again
            answer = self.server.json("POST", "/v1/chat/completions",
                                      self._chat_body(self.max_tokens))
            if isinstance(answer, dict):
                self.server.note_usage(answer.get("usage"))
            try:
                message = answer["choices"][0]["message"]
            except (KeyError, IndexError, TypeError) as exc:
                raise CheckError(f"no message in the chat answer: {answer!r:.120}") from exc
        _need(isinstance(message, dict), f"the chat message is {message!r:.120}")
        assert isinstance(message, dict)
        for key in REASONING_FIELDS:
            value = message.get(key)
            if isinstance(value, str) and value:
                return f"message.{key}: {len(value)} chars of reasoning"
        return self._no_reasoning(message)

    @staticmethod
    def _no_reasoning(message: dict[str, Any]) -> str:
        content = message.get("content")
        hint = ""
        if isinstance(content, str) and "<think>" in content:
            hint = " (the content carries '<think>')"
        raise CheckError(
            f"the chat answer has no reasoning (neither {' nor '.join(REASONING_FIELDS)})"
            f"{hint}: is the server started with --reasoning-parser?")

    def read_metrics_before(self) -> None:
        try:
            value = counter_value(self.server.metrics(), GENERATION_TOKENS_METRIC)
        except CheckError as exc:
            self.metrics_before_error = str(exc)
            return
        if value is None:
            self.metrics_before_error = f"no {GENERATION_TOKENS_METRIC} counter"
        self.metrics_before = value

    def metrics(self) -> str:
        expected = self.server.tokens_received
        deadline = time.monotonic() + METRICS_SETTLE_S
        while True:
            samples = self.server.metrics()
            missing = [name for name in (RUNNING_METRIC, TTFT_METRIC)
                       if not any(s == name or s.startswith(name + "_") for s in samples)]
            after = counter_value(samples, GENERATION_TOKENS_METRIC)
            if after is None:
                missing.append(GENERATION_TOKENS_METRIC + "_total")
            _need(not missing, f"GET /metrics lacks {', '.join(missing)}")
            assert after is not None
            _need(self.metrics_before is not None,
                  f"the generation-token counter was not read before the checks: "
                  f"{self.metrics_before_error}")
            assert self.metrics_before is not None
            grown = after - self.metrics_before
            if expected == 0:
                return (f"{RUNNING_METRIC}, {TTFT_METRIC}, {GENERATION_TOKENS_METRIC}_total "
                        "present (no completion tokens received to compare)")
            if grown >= expected:
                return (f"{RUNNING_METRIC}, {TTFT_METRIC} present; "
                        f"{GENERATION_TOKENS_METRIC}_total +{grown:g} (>= {expected} received)")
            if time.monotonic() >= deadline:
                raise CheckError(
                    f"{GENERATION_TOKENS_METRIC}_total grew by {grown:g}, less than the "
                    f"{expected} completion tokens received")
            time.sleep(0.2)

    def concurrency_check(self) -> str:
        n = self.concurrency
        started = time.monotonic()

        def one(_: int) -> str | None:
            try:
                self._completion(self.max_tokens)
            except CheckError as exc:
                return str(exc)
            return None

        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="validate") as pool:
            errors = [e for e in pool.map(one, range(n)) if e is not None]
        wall = time.monotonic() - started
        ok = n - len(errors)
        summary = f"{ok}/{n} ok in {wall:.2f} s"
        _need(not errors, f"{summary}; first failure: {errors[0] if errors else ''}")
        return f"{summary} ({n * self.max_tokens / wall:.0f} completion tokens/s)"


def run_checks(
    url: str,
    *,
    api_key: str | None = None,
    served_name: str | None = None,
    reasoning: bool = False,
    tools: bool = False,
    concurrency: int = DEFAULT_CONCURRENCY,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    timeout: float = DEFAULT_TIMEOUT,
) -> Report:
    """Run every check against the vLLM server at ``url`` (``http(s)://host:port[/v1]``).

    ``reasoning``: the server runs a reasoning parser (check its output; bound the thinking of
    the tool checks). ``tools``: the server runs a tool-call parser (add the tool checks).

    Raises ``ValueError`` for a bad URL or bad numbers (nothing is checked); a server that does
    not answer gives failed checks, not an exception.
    """
    problem = url_error(url)
    if problem:
        raise ValueError(problem)
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValueError(f"concurrency must be 1..{MAX_CONCURRENCY}, not {concurrency}")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, not {max_tokens}")
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, not {timeout}")

    server = _Server(url, api_key or None, timeout, pool=max(concurrency, 4))
    checks = _Checks(server, served_name, reasoning, concurrency, max_tokens)
    report = Report(url=url, served_name=served_name)

    def run(name: str, fn: Callable[[], str], needs_model: bool = True) -> None:
        if name != "health" and server.unreachable:
            report.checks.append(
                Check(name, False, "not run: the server does not answer (see health)", 0.0))
            return
        if needs_model and checks.model is None:
            report.checks.append(Check(
                name, False, "not run: no served model name (models failed; pass --served-name)",
                0.0))
            return
        started = time.monotonic()
        try:
            detail, ok = fn(), True
        except CheckError as exc:
            detail, ok = str(exc), False
        except Exception as exc:  # a bug or an answer of an unexpected shape: report, go on
            detail, ok = f"unexpected {type(exc).__name__}: {exc}", False
        report.checks.append(
            Check(name, ok, redact(detail, api_key), time.monotonic() - started))

    try:
        run("health", checks.health, needs_model=False)
        run("models", checks.models, needs_model=False)
        report.served_name = checks.model
        if api_key:
            run("auth", checks.auth, needs_model=False)
        if not server.unreachable:
            checks.read_metrics_before()
        run("completion", checks.completion)
        run("completion-stream", checks.completion_stream)
        run("chat", checks.chat)
        run("chat-stream", checks.chat_stream)
        run("max-tokens", checks.max_tokens_check)
        if reasoning:
            run("reasoning", checks.reasoning_check)
        if tools:
            run("tools-auto", checks.tools_auto)
            run("tools-none", checks.tools_none)
            run("tools-named", checks.tools_named)
            run("tools-named-stream", checks.tools_named_stream)
        run("metrics", checks.metrics, needs_model=False)
        run("concurrency", checks.concurrency_check)
    finally:
        server.close()
    return report


def render_text(report: Report) -> str:
    """A plain aligned table (check, result, seconds, detail) and a summary line."""
    rows = [("CHECK", "RESULT", "SECONDS", "DETAIL")]
    rows += [(c.name, "PASS" if c.ok else "FAIL", f"{c.seconds:.3f}", c.detail)
             for c in report.checks]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"{name:<{widths[0]}}  {result:<{widths[1]}}  {seconds:>{widths[2]}}  {detail}"
             .rstrip() for name, result, seconds, detail in rows]
    passed = sum(c.ok for c in report.checks)
    served = f" ({report.served_name})" if report.served_name else ""
    verdict = "OK" if report.ok else "FAILED"
    lines.append(f"{passed}/{len(report.checks)} checks passed against {report.url}{served}: "
                 f"{verdict}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Command line


def resolve_api_key(env_name: str | None, key_file: str | os.PathLike[str] | None) -> str | None:
    """The API key from ``key_file`` or the environment variable ``env_name``.

    The file holds the bare key, or the ``VLLM_API_KEY=...`` line of a systemd environment
    file (the vllm_service role's). ``env_name`` None means ``VLLM_API_KEY`` if set (no key
    otherwise); a variable named explicitly must be set. Raises ``ValueError`` (never showing
    the key) when unusable.
    """
    if key_file is not None and env_name is not None:
        raise ValueError("give --api-key-env or --api-key-file, not both")
    if key_file is not None:
        try:
            key = Path(key_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read the API key file {key_file}: {exc}") from exc
        key = key.removeprefix(f"{DEFAULT_API_KEY_ENV}=").strip()
        if not key:
            raise ValueError(f"the API key file {key_file} is empty")
        return key
    if env_name is None:
        return os.environ.get(DEFAULT_API_KEY_ENV) or None
    if not env_name:
        raise ValueError("--api-key-env needs a variable name")
    env_key = os.environ.get(env_name)
    if not env_key:
        raise ValueError(f"the environment variable {env_name} (--api-key-env) is not set")
    return env_key


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="validate.py",
        description="Validate a running OpenAI-compatible vLLM server. Exit 0: every check "
                    "passed; 1: a check failed; 2: bad arguments.")
    parser.add_argument("url", help="server URL, e.g. http://127.0.0.1:8000 (a /v1 suffix is "
                                    "accepted)")
    parser.add_argument("--served-name", help="the --served-model-name to expect (default: the "
                                              "first model the server lists)")
    parser.add_argument("--reasoning", action="store_true",
                        help="check that chat answers carry the reasoning parser's output")
    parser.add_argument("--tools", action="store_true",
                        help="check tool calling (the server runs a tool-call parser): "
                             "tool_choice auto, none and a named function, plain and streamed")
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY,
                        help=f"concurrent requests of the concurrency check, 1..{MAX_CONCURRENCY}"
                             f" (default {DEFAULT_CONCURRENCY})")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                        help=f"tokens per generation request (default {DEFAULT_MAX_TOKENS})")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds per request (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--api-key-env", metavar="NAME",
                        help=f"environment variable holding the API key (default "
                             f"{DEFAULT_API_KEY_ENV}, when set)")
    parser.add_argument("--api-key-file", metavar="PATH", help="file holding the API key")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    try:
        api_key = resolve_api_key(args.api_key_env, args.api_key_file)
        report = run_checks(args.url, api_key=api_key, served_name=args.served_name,
                            reasoning=args.reasoning, tools=args.tools,
                            concurrency=args.concurrency,
                            max_tokens=args.max_tokens, timeout=args.timeout)
    except ValueError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps(report.as_dict(), indent=2) if args.json else render_text(report))
    return EXIT_OK if report.ok else EXIT_CHECK_FAILED


if __name__ == "__main__":
    sys.exit(main())
