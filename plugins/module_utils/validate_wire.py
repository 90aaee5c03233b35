"""What ``validate.py`` reads and writes, without a server: the checks' inputs and names, the
report, and the parsers of what a vLLM server answers (URLs, server-sent events, ``usage``,
Prometheus metrics, tool calls and their schemas).

Node-side (standard library only, Python 3.8+): the ``vllm_service`` role installs it beside
``validate.py`` on a serving node (``ascend_serve_validate/``); the ``ascend_serve`` package imports
it for ``ascend-serve validate`` and ``bench``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

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
            raise CheckError(f"the server sent an error in the stream: {error_text(event)}")
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


def error_text(body: Any) -> str:
    """The message of an OpenAI/vLLM error body (``{"error": …}`` or ``{"message": …}``)."""
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            message = error.get("message") or error.get("detail") or json.dumps(error)
            return str(message)[:300]
        return str(error)[:300]
    return str(body)[:300]


def require(condition: bool, message: str) -> None:
    if not condition:
        raise CheckError(message)




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
