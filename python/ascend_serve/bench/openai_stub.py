"""A trivial OpenAI-compatible streaming endpoint, to measure the benchmark client itself.

It answers ``/v1/completions`` and ``/v1/chat/completions`` with ``max_tokens`` (or
``max_completion_tokens``) pre-rendered server-sent events, after a programmed time to the
first token and with a programmed gap between tokens (both 0 by default: as fast as asyncio
writes; token ``i`` is due ``ttft + i * itl`` after the request, so late wake-ups do not add
up), then a ``usage`` event and ``[DONE]``; also ``/v1/models``, ``/health`` and
``/metrics`` (vLLM's request, prompt- and generation-token counters). Only the standard
library: an ``asyncio`` HTTP/1.1 server with keep-alive and chunked answers, nothing more.

In a thread of the calling process (tests)::

    with StubServer(ttft_s=0.05, itl_s=0.01) as stub:
        run_benchmark(BenchConfig(url=stub.url, tokenizer=..., ...))

Or as its own process (``bench/client_ceiling.py``, so the client has a core to itself)::

    python -m ascend_serve.bench.openai_stub --port 8099 [--ttft-ms 0] [--itl-ms 0]

A prompt's token count (``usage.prompt_tokens``) is its number of whitespace-separated words.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Any

MODEL = "stub"
DEFAULT_MAX_TOKENS = 16
MAX_MODEL_LEN = 1 << 20


@dataclass
class Counters:
    hits: int = 0  # every HTTP request, of any path
    requests: int = 0  # generation requests answered
    prompt_tokens: int = 0
    generation_tokens: int = 0
    failed: int = 0


def _chunk(payload: bytes) -> bytes:
    """One HTTP chunk (chunked transfer encoding)."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return _chunk(f"data: {text}\n\n".encode())


_TOKEN_COMPLETION = _event({"id": "cmpl-stub", "object": "text_completion", "model": MODEL,
                            "choices": [{"index": 0, "text": " tok", "finish_reason": None}]})
_TOKEN_CHAT = _event({"id": "chatcmpl-stub", "object": "chat.completion.chunk", "model": MODEL,
                      "choices": [{"index": 0, "delta": {"content": " tok"},
                                   "finish_reason": None}]})
_ROLE_CHAT = _event({"id": "chatcmpl-stub", "object": "chat.completion.chunk", "model": MODEL,
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                  "finish_reason": None}]})
_DONE = _event("[DONE]") + _chunk(b"")
_STREAM_HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n")


def _response(status: str, body: bytes, content_type: str = "application/json") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n").encode() + body


class StubServer:
    """The endpoint on ``127.0.0.1:port`` (0: a free port) in a daemon thread."""

    def __init__(self, *, port: int = 0, ttft_s: float = 0.0, itl_s: float = 0.0,
                 api_key: str | None = None, fail_every: int = 0,
                 max_model_len: int = MAX_MODEL_LEN) -> None:
        self.port = port
        self.max_model_len = max_model_len
        self.ttft_s = ttft_s
        self.itl_s = itl_s
        self.api_key = api_key
        self.fail_every = fail_every  # every Nth generation request answers 500 (0: none)
        self.counters = Counters()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[Any] | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- HTTP -----------------------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        name, _, value = line.partition(":")
                        headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                body = await reader.readexactly(length) if length else b""
                self.counters.hits += 1
                await self._answer(method, path.split("?", 1)[0], headers, body, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, method: str, path: str, headers: dict[str, str], body: bytes,
                      writer: asyncio.StreamWriter) -> None:
        if path == "/health":
            writer.write(_response("200 OK", b""))
        elif path == "/metrics":
            c = self.counters
            text = (f"vllm:request_success_total{{model_name=\"{MODEL}\"}} {c.requests}\n"
                    f"vllm:prompt_tokens_total{{model_name=\"{MODEL}\"}} {c.prompt_tokens}\n"
                    f"vllm:generation_tokens_total{{model_name=\"{MODEL}\"}} "
                    f"{c.generation_tokens}\n")
            writer.write(_response("200 OK", text.encode(), "text/plain"))
        elif self.api_key and headers.get("authorization") != f"Bearer {self.api_key}":
            writer.write(_response("401 Unauthorized",
                                   b'{"error":{"message":"Unauthorized"}}'))
        elif path == "/v1/models" and method == "GET":
            models = {"object": "list", "data": [{"id": MODEL, "object": "model", "root": None,
                                                  "max_model_len": self.max_model_len}]}
            writer.write(_response("200 OK", json.dumps(models).encode()))
        elif path in ("/v1/completions", "/v1/chat/completions") and method == "POST":
            await self._stream(path.endswith("chat/completions"), body, writer)
            return
        else:
            writer.write(_response("404 Not Found", b'{"error":{"message":"not found"}}'))
        await writer.drain()

    async def _stream(self, chat: bool, body: bytes, writer: asyncio.StreamWriter) -> None:
        request = json.loads(body)
        tokens = int(request.get("max_completion_tokens") or request.get("max_tokens")
                     or DEFAULT_MAX_TOKENS)
        if chat:
            prompt = " ".join(str(m.get("content", "")) for m in request.get("messages", []))
        else:
            prompt = str(request.get("prompt", ""))
        prompt_tokens = max(1, len(prompt.split()))
        number = self.counters.requests + self.counters.failed + 1
        if self.fail_every and number % self.fail_every == 0:
            self.counters.failed += 1
            writer.write(_response("500 Internal Server Error",
                                   b'{"error":{"message":"stub: planted failure"}}'))
            await writer.drain()
            return
        writer.write(_STREAM_HEAD)
        if chat:
            writer.write(_ROLE_CHAT)
        token = _TOKEN_CHAT if chat else _TOKEN_COMPLETION
        paced = self.ttft_s > 0 or self.itl_s > 0
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i in range(tokens):
            if paced:
                # Token i is due at start + ttft + i * itl: a late wake-up does not add up.
                await asyncio.sleep(max(0.0, start + self.ttft_s + i * self.itl_s - loop.time()))
            writer.write(token)
            if paced:
                await writer.drain()
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": tokens,
                 "total_tokens": prompt_tokens + tokens}
        # Count before the last event goes out: a client that has read [DONE] may look at the
        # counters at once, before this coroutine resumes from drain().
        self.counters.requests += 1
        self.counters.prompt_tokens += prompt_tokens
        self.counters.generation_tokens += tokens
        writer.write(_event({"id": "stub", "choices": [], "usage": usage}) + _DONE)
        await writer.drain()

    # -- lifecycle ------------------------------------------------------------------------

    async def serve(self) -> None:
        """Serve in the running loop until cancelled."""
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port,
                                                  backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        async with self._server:
            await self._server.serve_forever()

    def _run(self) -> None:
        async def serve_until_cancelled() -> None:
            self._task = asyncio.current_task()
            with contextlib.suppress(asyncio.CancelledError):
                await self.serve()

        asyncio.run(serve_until_cancelled())

    def start(self) -> StubServer:
        self._thread = threading.Thread(target=self._run, name="openai-stub", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the stub server did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ascend_serve.bench.openai_stub",
                                     description="A trivial OpenAI-compatible SSE endpoint.")
    parser.add_argument("--port", type=int, default=8099)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--itl-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    stub = StubServer(port=args.port, ttft_s=args.ttft_ms / 1000, itl_s=args.itl_ms / 1000)
    print(f"serving on 127.0.0.1:{args.port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(stub.serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
