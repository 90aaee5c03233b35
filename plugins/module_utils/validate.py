"""Validate a running OpenAI-compatible vLLM server: health, models, auth, completions, tools,
metrics.

Needs only the standard library and ``httpx`` (which every vLLM environment has), with its
sibling ``validate_wire.py`` (the parsers and the report): the ``ascend-serve validate`` command
imports it, and the ``vllm_service`` role installs both on a serving node as the package
``ascend_serve_validate`` and runs it there with the vLLM interpreter (in a container runtime, in
the serving container, from the state directory it mounts)::

    PYTHONPATH=<dir> python -m ascend_serve_validate.validate http://127.0.0.1:8000 --json

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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from .validate_wire import (
    CHAT_MESSAGES,
    DEFAULT_API_KEY_ENV,
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_TOKENS,
    DEFAULT_TIMEOUT,
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_OK,
    GENERATION_TOKENS_METRIC,
    MAX_CONCURRENCY,
    METRICS_SETTLE_S,
    NAMED_TOOL,
    PROMPT,
    REASONING_FIELDS,
    RUNNING_METRIC,
    THINKING_TOKEN_BUDGET,
    TOOL_MAX_TOKENS,
    TOOL_MESSAGES,
    TOOLS,
    TTFT_METRIC,
    WHITESPACE_PIECES,
    Check,
    CheckError,
    Report,
    SSEStream,
    assemble_tool_calls,
    base_url,
    counter_value,
    error_text,
    parse_metrics,
    parse_sse,
    redact,
    render_text,
    require,
    tool_call_problems,
    url_error,
    usage_problems,
    usage_text,
    with_tool_parser_fix,
)

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
                require(content_type.startswith("text/event-stream"),
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
    require(isinstance(choices, list) and len(choices) == 1,
          f"expected one choice, got {choices!r:.120}")
    assert isinstance(choices, list)
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    require(isinstance(message, dict), f"choices[0].message is {message!r:.120}")
    assert isinstance(message, dict)
    require(message.get("role") == "assistant",
          f"message role {message.get('role')!r}, expected 'assistant'")
    return message


def _expect_ok(response: httpx.Response, what: str) -> None:
    if response.status_code == 200:
        return
    if response.status_code == 401:
        raise CheckError(f"{what}: 401 Unauthorized: the API key is missing or wrong "
                         "(--api-key-env / --api-key-file)")
    try:
        message = error_text(response.json())
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
        require(isinstance(answer, dict), "the completion answer is not a JSON object")
        usage = answer.get("usage")
        self.server.note_usage(usage)
        choices = answer.get("choices")
        require(isinstance(choices, list) and len(choices) == 1,
              f"expected one choice, got {choices!r:.120}")
        choice = choices[0]
        require(isinstance(choice, dict) and isinstance(choice.get("text"), str),
              f"choices[0].text is not a string: {choice!r:.120}")
        require(choice.get("finish_reason") == "length",
              f"finish_reason {choice.get('finish_reason')!r}, expected 'length'")
        problems = usage_problems(usage, max_tokens)
        require(not problems, "; ".join(problems))
        return f"{max_tokens} tokens, finish_reason length, {usage_text(usage)}"

    # Checks ---------------------------------------------------------------------------------

    def health(self) -> str:
        response = self.server.request("GET", "/health", auth=False)
        _expect_ok(response, "GET /health")
        return "GET /health: 200"

    def models(self) -> str:
        answer = self.server.json("GET", "/v1/models")
        data: Any = answer.get("data") if isinstance(answer, dict) else None
        require(isinstance(data, list), f"GET /v1/models: no 'data' list in {answer!r:.120}")
        ids: list[str] = [item["id"] for item in data
                          if isinstance(item, dict) and isinstance(item.get("id"), str)]
        require(bool(ids), "GET /v1/models lists no model")
        listed = ", ".join(ids)
        if self.model is None:
            self.model = ids[0]
            return f"no served name given: using the first listed, {ids[0]!r} (listed: {listed})"
        require(self.model in ids, f"served name {self.model!r} is not listed (listed: {listed})")
        return f"{self.model!r} listed"

    def auth(self) -> str:
        refused: list[str] = []
        for label, auth in (("without a key", False),
                            ("with a wrong key", f"wrong-{os.urandom(8).hex()}")):
            response = self.server.request("GET", "/v1/models", auth=auth)
            require(response.status_code == 401,
                  f"GET /v1/models {label}: HTTP {response.status_code}, expected 401 "
                  "(the server does not check the API key)")
            refused.append(label)
        return f"refused {' and '.join(refused)} (401)"

    def completion(self) -> str:
        return self._completion(self.max_tokens)

    def completion_stream(self) -> str:
        stream = self.server.stream("/v1/completions",
                                    self._completion_body(self.max_tokens, stream=True))
        require(stream.done, "the stream did not end with 'data: [DONE]'")
        text = ""
        finish: Any = None
        usage: Any = None
        for event in stream.events:
            for choice in event.get("choices") or []:
                piece = choice.get("text")
                require(piece is None or isinstance(piece, str), f"a text chunk is {piece!r:.60}")
                text += piece or ""
                finish = choice.get("finish_reason") or finish
            if event.get("usage") is not None:
                usage = event["usage"]
        self.server.note_usage(usage)
        require(bool(text), f"{len(stream.events)} events but no text")
        require(finish == "length", f"finish_reason {finish!r}, expected 'length'")
        problems = usage_problems(usage, self.max_tokens)
        require(not problems, "final usage: " + "; ".join(problems))
        return (f"{len(stream.events)} events, {len(text)} chars, [DONE], "
                f"{usage_text(usage)}")

    def chat(self) -> str:
        answer = self.server.json("POST", "/v1/chat/completions", self._chat_body(self.max_tokens))
        require(isinstance(answer, dict), "the chat answer is not a JSON object")
        usage = answer.get("usage")
        self.server.note_usage(usage)
        message = _assistant_message(answer)
        self.chat_message = message
        choices = answer["choices"]
        texts = {key: message.get(key) for key in ("content", *REASONING_FIELDS)}
        for key, value in texts.items():
            require(value is None or isinstance(value, str), f"message.{key} is {value!r:.60}")
        strings = {key: value for key, value in texts.items() if isinstance(value, str)}
        require(bool(strings), "the message has neither content nor reasoning")
        require(choices[0].get("finish_reason") == "length",
              f"finish_reason {choices[0].get('finish_reason')!r}, expected 'length'")
        problems = usage_problems(usage, self.max_tokens)
        require(not problems, "; ".join(problems))
        parts = ", ".join(f"{key} {len(value)} chars" for key, value in strings.items())
        return f"assistant: {parts}; {usage_text(usage)}"

    def chat_stream(self) -> str:
        stream = self.server.stream("/v1/chat/completions",
                                    self._chat_body(self.max_tokens, stream=True))
        require(stream.done, "the stream did not end with 'data: [DONE]'")
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
                    require(piece is None or isinstance(piece, str),
                          f"a delta's {key} is {piece!r:.60}")
                    if piece:
                        text[key] = text.get(key, "") + piece
                finish = choice.get("finish_reason") or finish
            if event.get("usage") is not None:
                usage = event["usage"]
        self.server.note_usage(usage)
        require(roles == {"assistant"}, f"delta roles {sorted(roles)}, expected ['assistant']")
        require(bool(text), f"{len(stream.events)} events but no content or reasoning")
        require(finish == "length", f"finish_reason {finish!r}, expected 'length'")
        problems = usage_problems(usage, self.max_tokens)
        require(not problems, "final usage: " + "; ".join(problems))
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
        require(isinstance(answer, dict), "the chat answer is not a JSON object")
        usage = answer.get("usage")
        self.server.note_usage(usage)
        problems = usage_problems(usage)
        require(not problems, "; ".join(problems))
        message = _assistant_message(answer)
        choices = answer["choices"]
        for key in ("content", *REASONING_FIELDS):
            value = message.get(key)
            require(value is None or isinstance(value, str), f"message.{key} is {value!r:.60}")
        calls = message.get("tool_calls")
        require(calls is None or isinstance(calls, list), f"message.tool_calls is {calls!r:.80}")
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
        require(not problems, "tool_choice 'auto': " + "; ".join(problems))
        if calls:
            return (f"tool_choice 'auto': {len(calls)} tool call(s): "
                    f"{', '.join(self._call_text(c) for c in calls)}")
        content = message.get("content")
        require(bool(content), "tool_choice 'auto': the answer has neither content nor tool calls, "
                             + self._no_call_hint(message, finish))
        assert isinstance(content, str)
        return f"tool_choice 'auto': accepted, answered with content ({len(content)} chars)"

    def tools_none(self) -> str:
        message, finish = self._tool_answer("none")
        calls = message.get("tool_calls") or []
        require(not calls, f"tool_choice 'none' was not honoured: {len(calls)} tool call(s) "
                         f"{json.dumps(calls)[:160]}")
        texts = {key: message.get(key) for key in ("content", *REASONING_FIELDS)
                 if message.get(key)}
        require(bool(texts), f"tool_choice 'none': the answer is empty, finish_reason {finish!r}")
        parts = ", ".join(f"{key} {len(str(value))} chars" for key, value in texts.items())
        return f"tool_choice 'none': no tool calls; {parts}"

    def _named_result(self, calls: list[Any], finish: Any, message: dict[str, Any]) -> str:
        require(bool(calls), f"tool_choice named {NAMED_TOOL!r}, but the answer has no tool call, "
                           + self._no_call_hint(message, finish))
        require(len(calls) == 1, f"tool_choice named {NAMED_TOOL!r}, but the answer has "
                               f"{len(calls)} tool calls: {json.dumps(calls)[:200]}")
        problems = tool_call_problems(calls[0], TOOLS, expected_name=NAMED_TOOL)
        require(not problems, "; ".join(problems))
        # OpenAI: "stop" for a named tool_choice; "tool_calls" is accepted too.
        require(finish in ("stop", "tool_calls"),
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
        require(stream.done, "the stream did not end with 'data: [DONE]'")
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
        require(not problems, "final usage: " + "; ".join(problems))
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
        require(isinstance(message, dict), f"the chat message is {message!r:.120}")
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
            require(not missing, f"GET /metrics lacks {', '.join(missing)}")
            assert after is not None
            require(self.metrics_before is not None,
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
        require(not errors, f"{summary}; first failure: {errors[0] if errors else ''}")
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
