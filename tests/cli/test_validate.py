"""``validate.py`` / ``ascend-serve validate``: canned data, stub HTTP servers, real vLLM servers.

The ``vllm`` tests run the checks against real tiny vLLM (CPU build) servers (``vllm_server``):
DeepSeek-V3 with the deepseek_r1 reasoning parser and an API key, then Qwen2 without either.
Tests are grouped by server so that each one starts once.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import typer
import vllm_server
from terminal import uncolored
from typer.testing import CliRunner
from vllm_server import VLLM_PYTHON, VllmServer, vllm_python

from ansible_collections.ascend_serve.fleet.plugins.module_utils import validate as v
from ansible_collections.ascend_serve.fleet.plugins.module_utils import validate_wire as w
from ascend_serve.cli.validate import validate as validate_command

REPO = Path(__file__).resolve().parents[2]
MODULE_UTILS = REPO / "plugins" / "module_utils"
NODE_FILES = ("validate.py", "validate_wire.py")  # what the vllm_service role installs


def node_package(base: Path) -> Path:
    """The validate package as the vllm_service role installs it on a node (tasks/check.yml):
    ``<base>/ascend_serve_validate/`` with the two files; returns what goes on PYTHONPATH."""
    package = base / "ascend_serve_validate"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name in NODE_FILES:
        shutil.copyfile(MODULE_UTILS / name, package / name)
    return base
ALL_CHECKS = list(w.CHECK_NAMES)  # with an API key, --reasoning and --tools
TOOL_CHECKS = list(w.TOOL_CHECK_NAMES)
WITHOUT_TOOLS = [n for n in ALL_CHECKS if n not in TOOL_CHECKS]
WITHOUT_KEY_OR_REASONING = [n for n in WITHOUT_TOOLS if n not in ("auth", "reasoning")]

# The command as cli.py registers it, beside a second command (so "validate" is a subcommand).
cli = typer.Typer()
cli.command("validate")(validate_command)
cli.command("noop", hidden=True)(lambda: None)
runner = CliRunner()


def names(report: w.Report) -> list[str]:
    return [c.name for c in report.checks]


def by_name(report: w.Report | dict[str, Any]) -> dict[str, Any]:
    if isinstance(report, w.Report):
        return {c.name: c for c in report.checks}
    return {c["name"]: c for c in report["checks"]}


def failed(report: w.Report) -> list[str]:
    return [c.name for c in report.checks if not c.ok]


# ---------------------------------------------------------------------------------------------
# Canned data: SSE parsing, usage consistency, metrics, URLs, keys, rendering

# A chat stream as vLLM 0.32 sends it (deepseek_r1 reasoning parser, include_usage).
CHAT_STREAM = """\
data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}

data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning":" fasts"},"finish_reason":null}]}

data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning":"ipelin"},"finish_reason":"length"}]}

data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":7,"total_tokens":9,"completion_tokens":2}}

data: [DONE]

"""  # noqa: E501


def test_parse_sse_reads_a_vllm_chat_stream() -> None:
    stream = w.parse_sse(CHAT_STREAM.splitlines())
    assert stream.done
    assert len(stream.events) == 4
    reasoning = "".join(e["choices"][0]["delta"].get("reasoning", "")
                        for e in stream.events if e["choices"])
    assert reasoning == " fastsipelin"
    assert stream.events[-1]["usage"] == {"prompt_tokens": 7, "total_tokens": 9,
                                          "completion_tokens": 2}


def test_parse_sse_joins_data_lines_and_skips_comments_and_fields() -> None:
    lines = [": keep-alive", "event: message", "id: 7", 'data: {"a":', "data: 1}", "",
             "retry: 100", "data: [DONE]"]
    stream = w.parse_sse(lines)
    assert stream.events == [{"a": 1}]
    assert stream.done


def test_parse_sse_without_done_says_so() -> None:
    stream = w.parse_sse(['data: {"choices": []}', ""])
    assert stream.events == [{"choices": []}]
    assert not stream.done


@pytest.mark.parametrize(("lines", "message"), [
    (["data: {not json"], "not JSON"),
    (["data: [1, 2]"], "not a JSON object"),
    (['data: {"error": {"message": "boom", "code": 500}}'], "error in the stream: boom"),
    (["data: [DONE]", "", 'data: {"late": 1}'], "after [DONE]"),
    (["HTTP/1.1 200 OK"], "not a server-sent event line"),
])
def test_parse_sse_rejects(lines: list[str], message: str) -> None:
    with pytest.raises(w.CheckError, match=re.escape(message)):
        w.parse_sse(lines)


def test_usage_consistent() -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 16, "total_tokens": 23}
    assert w.usage_problems(usage) == []
    assert w.usage_problems(usage, 16) == []
    assert w.usage_text(usage) == "usage 7+16=23"


@pytest.mark.parametrize(("usage", "expected", "message"), [
    ({"prompt_tokens": 7, "completion_tokens": 16, "total_tokens": 24}, None,
     "does not add up: 7 + 16 != 24"),
    ({"prompt_tokens": 7, "completion_tokens": 15, "total_tokens": 22}, 16,
     "15 completion tokens, expected 16"),
    ({"prompt_tokens": 0, "completion_tokens": 3, "total_tokens": 3}, 3, "prompt_tokens is 0"),
    ({"prompt_tokens": 7, "total_tokens": 7}, None, "usage.completion_tokens is None"),
    ({"prompt_tokens": True, "completion_tokens": 1, "total_tokens": 2}, None,
     "usage.prompt_tokens is True"),
    ({"prompt_tokens": "7", "completion_tokens": 1, "total_tokens": 8}, None,
     "usage.prompt_tokens is '7'"),
    (None, None, "no usage object"),
])
def test_usage_problems(usage: Any, expected: int | None, message: str) -> None:
    problems = w.usage_problems(usage, expected)
    assert problems
    assert any(message in p for p in problems), problems


METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 36.0
vllm:generation_tokens_total{engine="1",model_name="m"} 4.0
vllm:generation_tokens_created{engine="0",model_name="m"} 1.79e+09
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 3.0
process_open_fds 12
"""


def test_parse_metrics_sums_label_sets() -> None:
    samples = w.parse_metrics(METRICS)
    assert w.counter_value(samples, w.GENERATION_TOKENS_METRIC) == 40.0
    assert samples["vllm:num_requests_running"] == 0.0
    assert samples["vllm:time_to_first_token_seconds_count"] == 3.0
    assert "vllm:time_to_first_token_seconds" in samples  # the declared family
    assert samples["process_open_fds"] == 12.0
    assert w.counter_value(samples, "vllm:nothing") is None


@pytest.mark.parametrize(("url", "base"), [
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
    ("https://node-1:8443/v1/", "https://node-1:8443"),
    ("http://gw/llm/v1", "http://gw/llm"),
])
def test_base_url(url: str, base: str) -> None:
    assert w.url_error(url) is None
    assert w.base_url(url) == base


@pytest.mark.parametrize(("url", "message"), [
    ("ftp://host:21", "scheme must be http or https"),
    ("127.0.0.1:8000", "scheme must be http or https"),
    ("http://", "no host"),
    ("http://host:99999", "invalid URL"),
    ("http://host:8000/?x=1", "no query"),
])
def test_bad_urls(url: str, message: str) -> None:
    error = w.url_error(url)
    assert error is not None and message in error


def test_redact() -> None:
    assert w.redact("Bearer s3cret! s3cret", "s3cret") == "Bearer ***! ***"
    assert w.redact("nothing", None) == "nothing"


def test_resolve_api_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert v.resolve_api_key(None, None) is None
    monkeypatch.setenv("VLLM_API_KEY", "k1")
    assert v.resolve_api_key(None, None) == "k1"
    monkeypatch.setenv("OTHER_KEY", "k2")
    assert v.resolve_api_key("OTHER_KEY", None) == "k2"
    with pytest.raises(ValueError, match=r"NOT_SET_HERE \(--api-key-env\) is not set"):
        v.resolve_api_key("NOT_SET_HERE", None)
    key_file = tmp_path / "key"
    key_file.write_text("k3\n")
    assert v.resolve_api_key(None, key_file) == "k3"
    key_file.write_text("VLLM_API_KEY=k4\n")  # the vllm_service role's systemd env file
    assert v.resolve_api_key(None, key_file) == "k4"
    key_file.write_text("  \n")
    with pytest.raises(ValueError, match="is empty"):
        v.resolve_api_key(None, key_file)
    with pytest.raises(ValueError, match="cannot read"):
        v.resolve_api_key(None, tmp_path / "missing")
    with pytest.raises(ValueError, match="not both"):
        v.resolve_api_key("OTHER_KEY", key_file)


def test_report_dict_and_text() -> None:
    report = w.Report(url="http://h:1", served_name="m", checks=[
        w.Check("health", True, "GET /health: 200", 0.0123),
        w.Check("completion-stream", False, "no [DONE]", 1.5),
    ])
    assert not report.ok
    assert report.as_dict() == {
        "url": "http://h:1", "served_name": "m", "ok": False,
        "checks": [
            {"name": "health", "ok": True, "detail": "GET /health: 200", "seconds": 0.012},
            {"name": "completion-stream", "ok": False, "detail": "no [DONE]", "seconds": 1.5},
        ]}
    lines = w.render_text(report).splitlines()
    assert lines[0].split() == ["CHECK", "RESULT", "SECONDS", "DETAIL"]
    assert lines[1].split()[:3] == ["health", "PASS", "0.012"]
    assert lines[2].split()[:3] == ["completion-stream", "FAIL", "1.500"]
    # aligned: every column starts at the same offset on every row
    assert len({line.index("DETAIL" if i == 0 else ("GET" if i == 1 else "no "))
                for i, line in enumerate(lines[:3])}) == 1
    assert lines[-1] == "1/2 checks passed against http://h:1 (m): FAILED"
    assert w.Report(url="u", served_name=None).ok is False  # nothing checked is no pass


@pytest.mark.parametrize("kwargs", [
    {"url": "tcp://h:1"}, {"url": "http://h:1", "concurrency": 0},
    {"url": "http://h:1", "concurrency": 257}, {"url": "http://h:1", "max_tokens": 0},
    {"url": "http://h:1", "timeout": 0},
])
def test_run_checks_rejects_bad_arguments(kwargs: dict[str, Any]) -> None:
    url = kwargs.pop("url")
    with pytest.raises(ValueError):
        v.run_checks(url, **kwargs)


@pytest.mark.parametrize("argv", [
    ["ftp://h:1"], ["http://h:1", "--concurrency", "0"], ["http://h:1", "--concurrency", "x"],
    ["http://h:1", "--max-tokens", "0"], ["http://h:1", "--api-key-env", "NOT_SET_HERE"],
    ["http://h:1", "--api-key-file", "/nonexistent/key"], [],
])
def test_script_exit_2_on_bad_arguments(argv: list[str], capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    assert v.main(argv) == 2
    captured = capsys.readouterr()
    assert "error" in captured.err
    assert captured.out == ""



@pytest.mark.parametrize(("args", "message"), [
    (["not-a-url"], "scheme must be http or https"),
    (["http://h:1", "--concurrency", "0"], "--concurrency"),
    (["http://h:1", "--concurrency", "257"], "--concurrency"),
    (["http://h:1", "--max-tokens", "0"], "--max-tokens"),
    (["http://h:1", "--api-key-env", "NOT_SET_HERE"], "NOT_SET_HERE"),
])
def test_cli_exit_2_on_bad_arguments(args: list[str], message: str) -> None:
    result = runner.invoke(cli, ["validate", *args])
    assert result.exit_code == 2, result.output
    assert message in uncolored(result.output)
    assert "Traceback" not in result.output


def test_cli_help() -> None:
    result = runner.invoke(cli, ["validate", "--help"], env={"COLUMNS": "160"})
    assert result.exit_code == 0
    for option in ("--served-name", "--reasoning", "--no-reasoning", "--concurrency",
                   "--max-tokens", "--timeout", "--api-key-env", "--api-key-file", "--json"):
        assert option in uncolored(result.output)


@pytest.mark.parametrize("name", NODE_FILES)
def test_script_imports_only_stdlib_httpx_and_its_sibling(name: str) -> None:
    """The role copies the two files alone onto a node: nothing from ascend_serve, pydantic,
    rich; validate.py imports its sibling relatively (the package the role lays out)."""
    tree = ast.parse((MODULE_UTILS / name).read_text(encoding="utf-8"))
    imported, relative = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level:
            relative.add(node.module)
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported - set(sys.stdlib_module_names) <= {"httpx"}
    assert relative <= {"validate_wire"}


# Tool calls: what the checks accept and what they refuse

def call(name: str = "get_time", arguments: str = '{"zone": "utc"}', **overrides: Any
         ) -> dict[str, Any]:
    """An OpenAI tool_calls entry as vLLM 0.32 answers it."""
    entry: dict[str, Any] = {"id": "chatcmpl-tool-1", "type": "function",
                             "function": {"name": name, "arguments": arguments}}
    entry.update(overrides)
    return entry


def test_well_formed_tool_calls() -> None:
    assert w.tool_call_problems(call(), w.TOOLS) == []
    assert w.tool_call_problems(call(), w.TOOLS, expected_name="get_time") == []
    assert w.tool_call_problems(call("get_weather", '{"unit":"celsius"}'), w.TOOLS) == []


@pytest.mark.parametrize(("entry", "expected_name", "message"), [
    (call(id=""), None, "tool call id is ''"),
    (call(type="tool"), None, "type is 'tool', not 'function'"),
    (call("get_weather", '{"unit": "celsius"}'), "get_time",
     "called 'get_weather', but tool_choice named 'get_time'"),
    (call("rm_rf"), None, "called 'rm_rf', which is not offered (get_weather, get_time)"),
    (call(arguments='{"zone": "utc"'), None, "arguments are not JSON"),
    (call(arguments='["utc"]'), None, "arguments are not a JSON object"),
    (call(arguments='{"zone": "mars"}'), None, "zone: 'mars' is not one of ['utc', 'local']"),
    (call(arguments="{}"), None, "missing zone"),
    (call(arguments='{"zone": "utc", "x": 1}'), None, "unexpected x"),
    (call(arguments='{"zone": 7}'), None, "zone: 7 is not a string"),
    ({"id": "c", "type": "function", "function": None}, None, "tool call function is None"),
    ("get_time()", None, "not an object"),
])
def test_tool_call_problems(entry: Any, expected_name: str | None, message: str) -> None:
    problems = w.tool_call_problems(entry, w.TOOLS, expected_name=expected_name)
    assert any(message in p for p in problems), problems


# A named tool call streamed as vLLM 0.32 streams it (deepseek_v3 parser): the first delta has
# id, type and name, the arguments follow in pieces.
TOOL_STREAM: list[dict[str, Any]] = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
    {"choices": [{"index": 0, "delta": {"reasoning": "ur"}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [
        {"id": "chatcmpl-tool-9", "type": "function", "index": 0,
         "function": {"name": "get_time"}}]}}]},
    *[{"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": piece}}]}}]}
      for piece in ("{", '"zone', '":', '"ut', 'c"', "}")],
    {"choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "stop"}]},
    {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 20,
                              "total_tokens": 29}},
]


def test_assemble_streamed_tool_calls() -> None:
    assert w.assemble_tool_calls(TOOL_STREAM) == [call(arguments='{"zone":"utc"}',
                                                       id="chatcmpl-tool-9")]
    two = [{"choices": [{"delta": {"tool_calls": [
        {"index": 1, "id": "b", "type": "function", "function": {"name": "get_weather",
                                                                 "arguments": "{}"}},
        {"index": 0, "id": "a", "type": "function", "function": {"name": "get_time",
                                                                 "arguments": "{}"}}]}}]}]
    assert [c["id"] for c in w.assemble_tool_calls(two)] == ["a", "b"]
    assert w.assemble_tool_calls([{"choices": [{"delta": {"content": "hi"}}]}]) == []
    with pytest.raises(w.CheckError, match="no index"):
        w.assemble_tool_calls([{"choices": [{"delta": {"tool_calls": [{"id": "a"}]}}]}])


def test_tool_parser_fix_only_for_vllms_missing_parser_message() -> None:
    message = ('POST /v1/chat/completions: HTTP 400: "auto" tool choice requires '
               "--enable-auto-tool-choice and --tool-call-parser to be set")
    fixed = w.with_tool_parser_fix(message)
    assert fixed.startswith(message)
    assert "set tool_call_parser in the serving profile" in fixed
    assert w.with_tool_parser_fix("HTTP 500: engine dead") == "HTTP 500: engine dead"


def test_tools_option_in_both_command_lines() -> None:
    assert v._parser().parse_args(["http://h:1", "--tools"]).tools is True
    assert v._parser().parse_args(["http://h:1"]).tools is False
    result = runner.invoke(cli, ["validate", "--help"], env={"COLUMNS": "160"})
    assert "--tools" in uncolored(result.output) and "--no-tools" in uncolored(result.output)


# ---------------------------------------------------------------------------------------------
# Servers that are not (working) vLLM servers: nothing listening, 404 everywhere, hanging,
# broken answers


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


Handler = Callable[[BaseHTTPRequestHandler, dict[str, Any] | None], None]


class QuietServer(ThreadingHTTPServer):
    """Stops without waiting for handlers; a client that hung up (a timeout test) is no error."""

    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


@pytest.fixture
def stub_server() -> Iterator[Callable[[Handler], str]]:
    """Start ``http.server`` stubs in threads (``start(handler) -> url``); all stopped after."""
    servers: list[ThreadingHTTPServer] = []

    def start(handle: Handler) -> str:
        class RequestHandler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                handle(self, None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                handle(self, json.loads(self.rfile.read(length) or b"{}"))

        server = QuietServer(("127.0.0.1", 0), RequestHandler)
        servers.append(server)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def send(handler: BaseHTTPRequestHandler, status: int, body: str | bytes,
         content_type: str = "application/json") -> None:
    data = body.encode() if isinstance(body, str) else body
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def test_nothing_listening_fails_health_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    report = v.run_checks(url, served_name="m")
    health = by_name(report)["health"]
    assert not health.ok
    assert "cannot connect" in health.detail and "connection refused" in health.detail
    assert all(c.detail == "not run: the server does not answer (see health)"
               for c in report.checks[1:])
    assert v.main([url]) == 1
    captured = capsys.readouterr()
    assert "connection refused" in captured.out
    assert "Traceback" not in captured.out + captured.err
    result = runner.invoke(cli, ["validate", url, "--json"])
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert json.loads(result.stdout)["ok"] is False


def test_http_server_that_is_not_vllm_fails(stub_server: Callable[[Handler], str],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    url = stub_server(lambda h, body: send(h, 404, "<h1>Not Found</h1>", "text/html"))
    report = v.run_checks(url, timeout=5)
    checks = by_name(report)
    assert not report.ok
    assert checks["health"].detail == "GET /health: HTTP 404: <h1>Not Found</h1>"
    assert checks["models"].detail == "GET /v1/models: HTTP 404: <h1>Not Found</h1>"
    assert checks["completion"].detail.startswith("not run: no served model name")
    assert checks["metrics"].detail == "GET /metrics: HTTP 404: <h1>Not Found</h1>"
    assert v.main([url, "--timeout", "5"]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_hanging_server_times_out_once(stub_server: Callable[[Handler], str]) -> None:
    def hang(handler: BaseHTTPRequestHandler, body: dict[str, Any] | None) -> None:
        time.sleep(3)
        send(handler, 200, "")

    url = stub_server(hang)
    started = time.monotonic()
    report = v.run_checks(url, served_name="m", timeout=0.5)
    assert time.monotonic() - started < 2.5  # one timeout, not one per check
    assert by_name(report)["health"].detail == (
        f"GET {url}/health: no answer within 0.5 s (ReadTimeout)")
    assert all(c.detail.startswith("not run: the server does not answer")
               for c in report.checks[1:])


def broken_vllm(handler: BaseHTTPRequestHandler, body: dict[str, Any] | None) -> None:
    """Answers every endpoint, each one wrong in its own way."""
    path = handler.path
    if path == "/health":
        send(handler, 200, "")
    elif path == "/v1/models":
        send(handler, 200, json.dumps({"object": "list", "data": [{"id": "fake"}]}))
    elif path == "/metrics":
        send(handler, 200, "# TYPE vllm:num_requests_running gauge\n"
                           "vllm:num_requests_running 0\n", "text/plain")
    elif path == "/v1/completions" and body and body.get("stream"):
        # no [DONE], no usage
        send(handler, 200, 'data: {"choices":[{"text":"hi","finish_reason":"length"}]}\n\n',
             "text/event-stream")
    elif path == "/v1/completions":
        usage = {"prompt_tokens": 5, "completion_tokens": body["max_tokens"] if body else 0,
                 "total_tokens": 99}
        send(handler, 200, json.dumps({"choices": [{"text": "hi", "finish_reason": "length"}],
                                       "usage": usage}))
    elif path == "/v1/chat/completions" and body and body.get("stream"):
        send(handler, 500, json.dumps({"error": {"message": "engine dead"}}))
    elif path == "/v1/chat/completions":
        send(handler, 200, json.dumps({
            "choices": [{"message": {"role": "user", "content": "<think>x"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}))
    else:
        send(handler, 404, json.dumps({"error": {"message": f"no route {path}"}}))


def test_broken_answers_fail_with_details(stub_server: Callable[[Handler], str]) -> None:
    url = stub_server(broken_vllm)
    report = v.run_checks(url, reasoning=True, concurrency=3, timeout=5)
    checks = by_name(report)
    assert names(report) == [n for n in WITHOUT_TOOLS if n != "auth"]
    assert checks["health"].ok and checks["models"].ok
    assert "using the first listed, 'fake'" in checks["models"].detail
    assert report.served_name == "fake"
    assert checks["completion"].detail == "usage does not add up: 5 + 16 != 99"
    assert checks["completion-stream"].detail == "the stream did not end with 'data: [DONE]'"
    assert checks["chat"].detail == "message role 'user', expected 'assistant'"
    assert checks["chat-stream"].detail == "POST /v1/chat/completions: HTTP 500: engine dead"
    assert checks["max-tokens"].detail == "usage does not add up: 5 + 3 != 99"
    assert "no reasoning" in checks["reasoning"].detail
    assert "content carries '<think>'" in checks["reasoning"].detail
    assert checks["metrics"].detail == ("GET /metrics lacks vllm:time_to_first_token_seconds, "
                                        "vllm:generation_tokens_total")
    assert checks["concurrency"].detail.startswith("0/3 ok in ")
    assert "first failure: usage does not add up" in checks["concurrency"].detail


def chat_answer(message: dict[str, Any], finish: str = "stop") -> str:
    return json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", **message},
                                    "finish_reason": finish}],
                       "usage": {"prompt_tokens": 9, "completion_tokens": 5,
                                 "total_tokens": 14}})


def sse(events: list[dict[str, Any]]) -> str:
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"


def tool_stub(chat: Callable[[dict[str, Any]], tuple[int, str, str]]) -> Handler:
    """A server that answers health and models; chat requests with tools go to ``chat``;
    no /tokenize (404), as servers other than vLLM."""
    def handle(handler: BaseHTTPRequestHandler, body: dict[str, Any] | None) -> None:
        if handler.path == "/health":
            send(handler, 200, "")
        elif handler.path == "/v1/models":
            send(handler, 200, json.dumps({"data": [{"id": "m"}]}))
        elif handler.path == "/v1/chat/completions" and body and "tools" in body:
            send(handler, *chat(body))
        else:
            send(handler, 404, json.dumps({"error": {"message": f"no route {handler.path}"}}))
    return handle


def run_tool_checks(url: str, **kwargs: Any) -> dict[str, Any]:
    """The tool checks' outcomes (the others fail against a stub: not looked at here)."""
    report = v.run_checks(url, served_name="m", tools=True, concurrency=1, timeout=5, **kwargs)
    checks = by_name(report)
    assert [n for n in names(report) if n.startswith("tools-")] == TOOL_CHECKS
    return {n: checks[n] for n in TOOL_CHECKS}


def test_tools_without_a_tool_parser_say_how_to_fix_it(stub_server: Callable[[Handler], str]
                                                       ) -> None:
    """vLLM 0.32's answers to tools when started without --enable-auto-tool-choice
    --tool-call-parser (vllm/renderers/online_renderer.py)."""
    requests: list[dict[str, Any]] = []

    def no_parser(body: dict[str, Any]) -> tuple[int, str, str]:
        requests.append(body)
        choice = body["tool_choice"]
        if choice == "none":
            return 200, chat_answer({"content": "It is noon."}), "application/json"
        if choice == "auto":
            message = ('"auto" tool choice requires --enable-auto-tool-choice and '
                       "--tool-call-parser to be set")
        else:
            message = (f'tool_choice=function "{choice["function"]["name"]}" requires '
                       "--tool-call-parser to be set")
        return 400, json.dumps({"error": {"message": message, "type": "BadRequestError",
                                          "code": 400}}), "application/json"

    checks = run_tool_checks(stub_server(tool_stub(no_parser)))
    assert checks["tools-none"].ok, checks["tools-none"].detail
    assert checks["tools-auto"].detail == (
        'POST /v1/chat/completions: HTTP 400: "auto" tool choice requires '
        "--enable-auto-tool-choice and --tool-call-parser to be set: " + w.TOOL_PARSER_FIX)
    for name in ("tools-named", "tools-named-stream"):
        assert not checks[name].ok
        assert 'tool_choice=function "get_time" requires --tool-call-parser' in checks[name].detail
        assert checks[name].detail.endswith(
            "set tool_call_parser in the serving profile (vLLM --enable-auto-tool-choice "
            "--tool-call-parser, deepseek_v3 for DeepSeek-V3/R1)")
    # What was asked: the offered tools, temperature 0, no reasoning budget without --reasoning,
    # no logit_bias where /tokenize is missing.
    assert [r["tool_choice"] for r in requests] == [
        "auto", "none", {"type": "function", "function": {"name": "get_time"}},
        {"type": "function", "function": {"name": "get_time"}}]
    assert all(r["tools"] == w.TOOLS and r["temperature"] == 0 for r in requests)
    assert not any("thinking_token_budget" in r or "logit_bias" in r for r in requests)
    assert requests[-1]["stream"] is True


def test_tool_choices_not_honoured_fail(stub_server: Callable[[Handler], str]) -> None:
    """A server that calls a tool for "none", calls the wrong function for a named choice and
    streams arguments that break the schema."""
    def wrong(body: dict[str, Any]) -> tuple[int, str, str]:
        choice = body["tool_choice"]
        if body.get("stream"):
            events = [dict(e) for e in TOOL_STREAM]
            events[-3] = {"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "function": {"arguments": ', "extra": 1}'}}]}}]}
            return 200, sse(events), "text/event-stream"
        if choice == "auto":
            return 200, chat_answer({"content": None, "tool_calls": [call("get_time", "utc")]},
                                    "tool_calls"), "application/json"
        if choice == "none":
            return 200, chat_answer({"content": "", "tool_calls": [call()]}), "application/json"
        return 200, chat_answer({"content": "", "tool_calls": [
            call("get_weather", '{"unit": "celsius"}')]}), "application/json"

    checks = run_tool_checks(stub_server(tool_stub(wrong)))
    assert not any(c.ok for c in checks.values())
    assert checks["tools-auto"].detail == "tool_choice 'auto': arguments are not JSON: 'utc'"
    assert checks["tools-none"].detail.startswith(
        "tool_choice 'none' was not honoured: 1 tool call(s) ")
    assert checks["tools-named"].detail == (
        "called 'get_weather', but tool_choice named 'get_time'")
    assert checks["tools-named-stream"].detail == (
        'arguments {"zone":"utc", "extra": 1}: unexpected extra')


def test_tool_answers_without_a_call_explain_why(stub_server: Callable[[Handler], str]) -> None:
    """All reasoning, cut at max_tokens: the hint names --reasoning; a "none" answer that is
    empty fails too."""
    def thinking(body: dict[str, Any]) -> tuple[int, str, str]:
        if body.get("stream"):
            return 200, sse([{"choices": [{"index": 0, "delta": {"reasoning": "hmm"}}]},
                             {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                              "usage": {"prompt_tokens": 9, "completion_tokens": 96,
                                        "total_tokens": 105}}]), "text/event-stream"
        if body["tool_choice"] == "none":
            return 200, chat_answer({"content": ""}), "application/json"
        return 200, chat_answer({"content": None, "reasoning": "hmm " * 20},
                                "length"), "application/json"

    checks = run_tool_checks(stub_server(tool_stub(thinking)))
    assert checks["tools-auto"].detail == (
        "tool_choice 'auto': the answer has neither content nor tool calls, finish_reason "
        f"'length' (max_tokens {w.TOOL_MAX_TOKENS} reached; the answer is all reasoning: with "
        "a reasoning parser, pass --reasoning so the tool checks bound the thinking)")
    assert checks["tools-none"].detail == "tool_choice 'none': the answer is empty, " \
                                          "finish_reason 'stop'"
    for name in ("tools-named", "tools-named-stream"):
        assert checks[name].detail.startswith(
            "tool_choice named 'get_time', but the answer has no tool call, finish_reason "
            "'length'"), checks[name].detail
        assert "pass --reasoning" in checks[name].detail


def test_api_key_never_in_details(stub_server: Callable[[Handler], str]) -> None:
    key = "sk-do-not-print-me"

    def echo_key(handler: BaseHTTPRequestHandler, body: dict[str, Any] | None) -> None:
        # A server that echoes the Authorization header back in its errors.
        send(handler, 400, json.dumps({"error": {"message": handler.headers["Authorization"]}}))

    url = stub_server(echo_key)
    report = v.run_checks(url, api_key=key, served_name="m", timeout=5)
    text = json.dumps(report.as_dict()) + w.render_text(report)
    assert key not in text
    assert "Bearer ***" in text


# ---------------------------------------------------------------------------------------------
# The server helper itself (no vLLM needed)


def test_missing_vllm_venv_fails_not_skips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    monkeypatch.setattr(vllm_server, "VLLM_VENV", tmp_path / "venv")
    monkeypatch.setattr(vllm_server, "VLLM_PYTHON", tmp_path / "venv" / "bin" / "python")
    with pytest.raises(pytest.fail.Exception, match=r"run scripts/bootstrap\.sh"):
        vllm_python()


def test_server_that_exits_fails_with_its_log(tmp_path: Path) -> None:
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(["sh", "-c", "echo 'engine exploded'; exit 3"], stdout=log,
                                start_new_session=True)
    with pytest.raises(pytest.fail.Exception, match="exited with 3") as info:
        vllm_server.wait_healthy(proc, f"http://127.0.0.1:{closed_port()}", log_path, 30)
    assert "engine exploded" in str(info.value)
    vllm_server.stop_group(proc)


def test_stop_group_catches_a_survivor(tmp_path: Path) -> None:
    """A child that ignores SIGTERM outlives the leader: killed, and the stop fails."""
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        ["sh", "-c", f"sh -c \"trap '' TERM; touch {ready}; sleep 60\" & wait"],
        start_new_session=True)
    deadline = time.monotonic() + 10
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(AssertionError, match="left after stopping"):
        vllm_server.stop_group(proc, settle_s=0.5)
    time.sleep(0.2)
    assert vllm_server.group_members(proc.pid) == []


# ---------------------------------------------------------------------------------------------
# Real vLLM: DeepSeek-V3 (deepseek_r1 reasoning parser, API key)


@pytest.mark.vllm
def test_deepseek_v3_passes_every_check(vllm_deepseek_v3: VllmServer) -> None:
    server = vllm_deepseek_v3
    print(f"{server.served_name} healthy in {server.startup_s:.1f} s")
    report = v.run_checks(server.url, api_key=server.api_key, served_name=server.served_name,
                          reasoning=True, tools=True)
    assert report.ok, w.render_text(report)
    assert names(report) == ALL_CHECKS
    checks = by_name(report)
    # vLLM 0.32 puts the deepseek_r1 parser's output in message.reasoning
    assert checks["reasoning"].detail.startswith("message.reasoning: ")
    # The random model answers "auto" with content; vLLM constrains the named choice to a real
    # get_time call in DeepSeek's syntax, parsed by the deepseek_v3 parser, plain and streamed.
    assert checks["tools-auto"].detail.startswith("tool_choice 'auto': ")
    for name, prefix in (("tools-named", ""), ("tools-named-stream",
                                               r"\d+ tool_calls deltas assemble to: ")):
        match = re.fullmatch(prefix + r"called get_time\((\{.*\})\), finish_reason stop",
                             checks[name].detail)
        assert match, checks[name].detail
        assert json.loads(match[1])["zone"] in ("utc", "local")
    assert checks["auth"].detail == "refused without a key and with a wrong key (401)"
    assert checks["completion"].detail.startswith("16 tokens, finish_reason length, usage ")
    assert checks["max-tokens"].detail.startswith("3 tokens, ")
    assert checks["concurrency"].detail.startswith("8/8 ok in ")
    assert "vllm:generation_tokens_total +" in checks["metrics"].detail
    assert server.api_key and server.api_key not in w.render_text(report)


@pytest.mark.vllm
def test_deepseek_v3_cli_table_and_json(vllm_deepseek_v3: VllmServer, tmp_path: Path) -> None:
    server = vllm_deepseek_v3
    assert server.api_key
    env = {"VLLM_API_KEY": server.api_key}
    result = runner.invoke(cli, ["validate", server.url, "--reasoning", "--tools",
                                 "--served-name", server.served_name, "--concurrency", "4"],
                           env=env)
    assert result.exit_code == 0, result.output
    for name in ALL_CHECKS:
        assert name in result.output
    assert result.output.count("PASS") == len(ALL_CHECKS)
    assert f"{len(ALL_CHECKS)}/{len(ALL_CHECKS)} checks passed: OK" in result.output
    assert server.api_key not in result.output

    key_file = tmp_path / "key"
    key_file.write_text(server.api_key + "\n")
    result = runner.invoke(cli, ["validate", server.url + "/v1", "--reasoning", "--json",
                                 "--api-key-file", str(key_file), "--max-tokens", "5",
                                 "--concurrency", "2"], env={"VLLM_API_KEY": None})
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ok"] is True
    assert data["served_name"] == server.served_name
    checks = by_name(data)
    assert list(checks) == WITHOUT_TOOLS  # no --tools: no tool checks
    assert checks["completion"]["detail"].startswith("5 tokens, ")
    assert checks["concurrency"]["detail"].startswith("2/2 ok")


@pytest.mark.vllm
def test_deepseek_v3_standalone_script_in_the_vllm_venv(vllm_deepseek_v3: VllmServer,
                                                       tmp_path: Path) -> None:
    """The two files alone, laid out as the role installs them, run by the vLLM venv's
    interpreter without user site-packages: stdlib + httpx."""
    server = vllm_deepseek_v3
    assert server.api_key
    proc = subprocess.run(
        [str(vllm_python()), "-s", "-m", "ascend_serve_validate.validate", server.url,
         "--served-name", server.served_name, "--reasoning", "--tools", "--json",
         "--api-key-env", "NODE_KEY"],
        capture_output=True, text=True, timeout=300, cwd="/",
        env={"NODE_KEY": server.api_key, "PYTHONPATH": str(node_package(tmp_path))},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] is True
    assert [c["name"] for c in data["checks"]] == ALL_CHECKS
    assert server.api_key not in proc.stdout + proc.stderr


@pytest.mark.vllm
def test_deepseek_v3_wrong_api_key(vllm_deepseek_v3: VllmServer) -> None:
    server = vllm_deepseek_v3
    wrong = "sk-wrong-key-for-the-test"
    report = v.run_checks(server.url, api_key=wrong, served_name=server.served_name,
                          concurrency=2)
    checks = by_name(report)
    assert not report.ok
    assert checks["health"].ok  # /health is not guarded
    assert checks["models"].detail.startswith("GET /v1/models: 401 Unauthorized")
    assert checks["completion"].detail.startswith("POST /v1/completions: 401 Unauthorized")
    assert checks["auth"].ok  # the server does refuse requests without the right key
    assert wrong not in json.dumps(report.as_dict())

    result = runner.invoke(cli, ["validate", server.url, "--api-key-env", "WRONG_KEY"],
                           env={"WRONG_KEY": wrong})
    assert result.exit_code == 1
    assert "401 Unauthorized" in result.output
    assert wrong not in result.output


@pytest.mark.vllm
def test_deepseek_v3_without_a_key_is_refused(vllm_deepseek_v3: VllmServer,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert v.main([vllm_deepseek_v3.url, "--served-name", "tiny-deepseek-v3"]) == 1
    report = v.run_checks(vllm_deepseek_v3.url, served_name="tiny-deepseek-v3", concurrency=1)
    assert "auth" not in names(report)
    assert "401 Unauthorized" in by_name(report)["models"].detail


@pytest.mark.vllm
def test_deepseek_v3_wrong_served_name(vllm_deepseek_v3: VllmServer,
                                       capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    server = vllm_deepseek_v3
    assert server.api_key
    monkeypatch.setenv("VLLM_API_KEY", server.api_key)
    report = v.run_checks(server.url, api_key=server.api_key, served_name="deepseek-r1",
                          concurrency=2)
    checks = by_name(report)
    assert checks["models"].detail == ("served name 'deepseek-r1' is not listed "
                                       "(listed: tiny-deepseek-v3)")
    assert not checks["completion"].ok
    assert "HTTP 404" in checks["completion"].detail
    assert "deepseek-r1" in checks["completion"].detail  # vLLM names the missing model
    assert checks["health"].ok and checks["auth"].ok and checks["metrics"].ok

    assert v.main([server.url, "--served-name", "deepseek-r1", "--concurrency", "1"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "served name 'deepseek-r1' is not listed" in out


# ---------------------------------------------------------------------------------------------
# Real vLLM: Qwen2 (R1-Distill-Qwen architecture, no API key, no reasoning parser)


@pytest.mark.vllm
def test_qwen2_passes_without_key_or_reasoning(vllm_qwen2: VllmServer,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    print(f"{vllm_qwen2.served_name} healthy in {vllm_qwen2.startup_s:.1f} s")
    report = v.run_checks(vllm_qwen2.url)
    assert report.ok, w.render_text(report)
    assert names(report) == WITHOUT_KEY_OR_REASONING
    assert report.served_name == "tiny-qwen2"
    assert "using the first listed, 'tiny-qwen2'" in by_name(report)["models"].detail
    assert by_name(report)["chat"].detail.startswith("assistant: content ")


@pytest.mark.vllm
def test_qwen2_reasoning_fails_without_a_parser(vllm_qwen2: VllmServer) -> None:
    report = v.run_checks(vllm_qwen2.url, served_name="tiny-qwen2", reasoning=True,
                          concurrency=2, max_tokens=4)
    assert failed(report) == ["reasoning"]
    assert "--reasoning-parser" in by_name(report)["reasoning"].detail


@pytest.mark.vllm
def test_qwen2_tools_fail_without_a_tool_parser(vllm_qwen2: VllmServer) -> None:
    """A real vLLM without --enable-auto-tool-choice --tool-call-parser: "auto" and a named
    choice are refused (400, vLLM's own words, and the fix); "none" needs no parser."""
    report = v.run_checks(vllm_qwen2.url, served_name="tiny-qwen2", tools=True, concurrency=1,
                          max_tokens=4)
    assert failed(report) == ["tools-auto", "tools-named", "tools-named-stream"]
    checks = by_name(report)
    assert checks["tools-auto"].detail == (
        'POST /v1/chat/completions: HTTP 400: "auto" tool choice requires '
        "--enable-auto-tool-choice and --tool-call-parser to be set: " + w.TOOL_PARSER_FIX)
    assert checks["tools-named"].detail.startswith(
        'POST /v1/chat/completions: HTTP 400: tool_choice=function "get_time" requires '
        "--tool-call-parser")
    assert checks["tools-named"].detail.endswith(w.TOOL_PARSER_FIX)
    assert checks["tools-none"].detail.startswith("tool_choice 'none': no tool calls; content ")


@pytest.mark.vllm
def test_qwen2_standalone_script_and_cli(vllm_qwen2: VllmServer, tmp_path: Path) -> None:
    assert VLLM_PYTHON.is_file()
    proc = subprocess.run(
        [str(VLLM_PYTHON), "-s", "-m", "ascend_serve_validate.validate", vllm_qwen2.url,
         "--concurrency", "16", "--max-tokens", "8"],
        capture_output=True, text=True, timeout=300, cwd="/",
        env={"PYTHONPATH": str(node_package(tmp_path))},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["CHECK", "RESULT", "SECONDS", "DETAIL"]
    assert [line.split()[:2] for line in lines[1:-1]] == [
        [name, "PASS"] for name in WITHOUT_KEY_OR_REASONING]
    assert lines[-1].endswith("(tiny-qwen2): OK")
    assert "16/16 ok" in proc.stdout

    result = runner.invoke(cli, ["validate", vllm_qwen2.url, "--served-name", "tiny-qwen2",
                                 "--json", "--no-reasoning"], env={"VLLM_API_KEY": None})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ok"] is True
