"""Real clients against the tiny DeepSeek-V3 vLLM server: the official ``openai`` Python client
and vLLM's own benchmark client (``vllm bench serve``).

Every test uses the session's ``vllm_deepseek_v3`` server (``vllm_server``: deepseek_r1
reasoning parser, deepseek_v3 tool-call parser with auto tool choice, an API key), so this file
starts no server of its own. The model is random: the tests check the shape of what the server
answers and what vLLM guarantees (token counts, constrained tool calls), never the text.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import openai
import pytest
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
    ChatCompletionToolMessageParam,
)
from vllm_server import VllmServer, server_counters, settled_counter_delta, vllm_python

from ansible_collections.ascend_serve.fleet.plugins.module_utils.validate_wire import (
    TOOLS,
    WHITESPACE_PIECES,
)
from ascend_serve.serving.tiny_model import TOOL_OUTPUT_END_TOKEN, TOOL_OUTPUTS_END_TOKEN

pytestmark = pytest.mark.vllm

MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What time is it? Use a tool."}]
# validate's two functions (strict schemas, one enum parameter each), typed for the client.
CHAT_TOOLS = cast(list[ChatCompletionFunctionToolParam], TOOLS)
TOOL_NAMES = [tool["function"]["name"] for tool in TOOLS]
ENUMS = {tool["function"]["name"]: next(iter(tool["function"]["parameters"]["properties"].items()))
         for tool in TOOLS}
# vLLM's thinking_token_budget (vLLM 0.32: vllm/entrypoints/openai/chat_completion/protocol.py):
# with --reasoning-parser deepseek_r1 the engine forces "</think>" after this many reasoning
# tokens. A tool call's grammar only applies once the reasoning has ended
# (vllm/v1/structured_output/__init__.py, _get_constraint_bounds); a random model would
# otherwise rarely write "</think>" at all.
THINKING = {"thinking_token_budget": 4}
TOOL_MAX_TOKENS = 96


@pytest.fixture(scope="module")
def client(vllm_deepseek_v3: VllmServer) -> Iterator[openai.OpenAI]:
    server = vllm_deepseek_v3
    http_client = openai.DefaultHttpx2Client(trust_env=False)  # no proxies from the environment
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.api_key, max_retries=0,
                       timeout=120, http_client=http_client) as api:
        yield api


@pytest.fixture(scope="module")
def whitespace_bias(vllm_deepseek_v3: VllmServer) -> dict[str, int]:
    """``logit_bias`` against the tiny tokenizer's whitespace-only tokens.

    vLLM constrains a tool call's arguments to the schema but not their whitespace (see
    ``WHITESPACE_PIECES`` in the collection's ``module_utils/validate.py``); at temperature 0 the
    random model pads the JSON with spaces until max_tokens. Without whitespace the call is
    compact JSON.
    """
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer.from_file(str(vllm_deepseek_v3.model_dir / "tokenizer.json"))
    bias = {}
    for piece in WHITESPACE_PIECES:
        ids = tokenizer.encode(piece, add_special_tokens=False).ids
        if len(ids) == 1:
            bias[str(ids[0])] = -100
    assert len(bias) >= 3, bias  # " ", "\n", "\t" at least
    return bias


def _extra(model: Any, key: str) -> Any:
    """A field vLLM adds to an OpenAI object (pydantic keeps unknown fields as extras)."""
    return (model.model_extra or {}).get(key)


# ---------------------------------------------------------------------------------------------
# The openai client


def test_models_list(client: openai.OpenAI, vllm_deepseek_v3: VllmServer) -> None:
    models = client.models.list()
    assert [m.id for m in models.data] == [vllm_deepseek_v3.served_name]
    assert models.data[0].object == "model"
    assert models.data[0].owned_by == "vllm"


def test_wrong_api_key_is_refused(vllm_deepseek_v3: VllmServer) -> None:
    with openai.OpenAI(base_url=f"{vllm_deepseek_v3.url}/v1", api_key="sk-wrong", max_retries=0,
                       timeout=30, http_client=openai.DefaultHttpx2Client(trust_env=False)
                       ) as wrong:
        with pytest.raises(openai.AuthenticationError) as info:
            wrong.models.list()
        assert info.value.status_code == 401
        with pytest.raises(openai.AuthenticationError):
            wrong.chat.completions.create(model=vllm_deepseek_v3.served_name,
                                          messages=MESSAGES, max_tokens=1)


def test_chat_plain_and_streamed_carry_the_reasoning(client: openai.OpenAI,
                                                     vllm_deepseek_v3: VllmServer) -> None:
    name = vllm_deepseek_v3.served_name
    chat = client.chat.completions.create(model=name, messages=MESSAGES, max_tokens=8,
                                          temperature=0, extra_body={"ignore_eos": True})
    assert chat.model == name
    assert chat.usage is not None
    assert chat.usage.completion_tokens == 8
    assert chat.usage.prompt_tokens + 8 == chat.usage.total_tokens
    (choice,) = chat.choices
    assert choice.finish_reason == "length"
    assert choice.message.role == "assistant"
    # The generation prompt opens "<think>\n", so the answer starts in the reasoning: vLLM 0.32
    # gives the deepseek_r1 parser's output as message.reasoning (no reasoning_content).
    reasoning = _extra(choice.message, "reasoning")
    assert isinstance(reasoning, str) and reasoning
    assert _extra(choice.message, "reasoning_content") is None

    stream = client.chat.completions.create(model=name, messages=MESSAGES, max_tokens=8,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True})
    roles, parts, usage, finish = set(), {"reasoning": "", "content": ""}, None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for delta_choice in chunk.choices:
            delta = delta_choice.delta
            if delta.role:
                roles.add(delta.role)
            parts["content"] += delta.content or ""
            parts["reasoning"] += _extra(delta, "reasoning") or ""
            assert _extra(delta, "reasoning_content") is None
            finish = delta_choice.finish_reason or finish
    assert roles == {"assistant"}
    assert finish == "length"
    assert usage is not None and usage.completion_tokens == 8
    # Greedy decoding: the stream adds up to the same answer.
    assert parts == {"reasoning": reasoning, "content": choice.message.content or ""}

    # thinking_token_budget ends the reasoning early: the parser splits reasoning and content.
    bounded = client.chat.completions.create(model=name, messages=MESSAGES, max_tokens=12,
                                             temperature=0,
                                             extra_body={"ignore_eos": True, **THINKING})
    message = bounded.choices[0].message
    assert _extra(message, "reasoning")
    assert message.content


def test_completions_with_n_and_logprobs(client: openai.OpenAI,
                                         vllm_deepseek_v3: VllmServer) -> None:
    completion = client.completions.create(
        model=vllm_deepseek_v3.served_name, prompt="The capital of France is", max_tokens=5,
        n=2, logprobs=2, temperature=1.0, seed=7, extra_body={"ignore_eos": True})
    assert [c.index for c in completion.choices] == [0, 1]
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 2 * 5  # both choices, ignore_eos
    for choice in completion.choices:
        assert choice.finish_reason == "length"
        logprobs = choice.logprobs
        assert logprobs is not None
        assert logprobs.tokens is not None and len(logprobs.tokens) == 5
        assert logprobs.token_logprobs is not None and len(logprobs.token_logprobs) == 5
        assert logprobs.top_logprobs is not None and len(logprobs.top_logprobs) == 5
        assert logprobs.text_offset is not None and logprobs.text_offset == sorted(
            logprobs.text_offset)
        for token, logprob, top in zip(logprobs.tokens, logprobs.token_logprobs,
                                       logprobs.top_logprobs, strict=True):
            assert logprob is not None and logprob <= 0.0
            # The 2 most likely tokens, and the sampled one where it is not among them.
            assert 2 <= len(top) <= 3
            assert token in top and top[token] == pytest.approx(logprob)
            assert all(value <= 0.0 for value in top.values())


def _tool_call_args(call: Any) -> tuple[str, dict[str, Any]]:
    assert call.type == "function"
    assert call.id
    arguments = json.loads(call.function.arguments)
    assert isinstance(arguments, dict)
    return call.function.name, arguments


def _assert_schema(name: str, arguments: dict[str, Any]) -> None:
    key, spec = ENUMS[name]
    assert arguments.keys() == {key}, arguments
    assert arguments[key] in spec["enum"]


def test_tools_named_required_auto_none(client: openai.OpenAI, vllm_deepseek_v3: VllmServer,
                                        whitespace_bias: dict[str, int]) -> None:
    name = vllm_deepseek_v3.served_name

    def ask(tool_choice: Any, max_tokens: int = TOOL_MAX_TOKENS) -> Any:
        return client.chat.completions.create(
            model=name, messages=MESSAGES, tools=CHAT_TOOLS, tool_choice=tool_choice,
            max_tokens=max_tokens, temperature=0, logit_bias=whitespace_bias,
            extra_body=THINKING)

    # Named: vLLM constrains the output to DeepSeek's tool-call syntax for exactly this function
    # (xgrammar's "deepseek_r1" structural tag) and the deepseek_v3 parser parses it.
    for wanted in TOOL_NAMES:
        named = ask({"type": "function", "function": {"name": wanted}})
        (choice,) = named.choices
        assert choice.message.tool_calls is not None, choice.message
        (call,) = choice.message.tool_calls
        called, arguments = _tool_call_args(call)
        assert called == wanted
        _assert_schema(called, arguments)
        assert choice.finish_reason == "stop"  # OpenAI: "stop" for a named tool_choice
        assert named.usage is not None and named.usage.completion_tokens < TOOL_MAX_TOKENS

    required = ask("required")
    (choice,) = required.choices
    assert choice.message.tool_calls, choice.message
    for call in choice.message.tool_calls:
        called, arguments = _tool_call_args(call)
        assert called in TOOL_NAMES
        _assert_schema(called, arguments)
    assert choice.finish_reason == "tool_calls"

    # Auto: the model may answer or call; a random model answers. Either way, well formed.
    auto = ask("auto", max_tokens=16)
    message = auto.choices[0].message
    if message.tool_calls:
        for call in message.tool_calls:
            called, arguments = _tool_call_args(call)
            assert called in TOOL_NAMES
    else:
        assert message.content

    none = ask("none", max_tokens=16)
    message = none.choices[0].message
    assert not message.tool_calls
    assert message.content or _extra(message, "reasoning")


def test_tool_call_streamed_and_sent_back(client: openai.OpenAI, vllm_deepseek_v3: VllmServer,
                                          whitespace_bias: dict[str, int]) -> None:
    """A named call streamed, then the conversation with the call and its result sent back: the
    server renders it with the tiny model's chat template as transformers does."""
    name = vllm_deepseek_v3.served_name
    stream = client.chat.completions.create(
        model=name, messages=MESSAGES, tools=CHAT_TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=TOOL_MAX_TOKENS, temperature=0, logit_bias=whitespace_bias, stream=True,
        extra_body=THINKING)
    calls: dict[int, dict[str, str]] = {}
    finish = None
    pieces = 0
    for chunk in stream:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                pieces += 1
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] = call["id"] or delta.id or ""
                if delta.function is not None:
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
    assert list(calls) == [0]
    assert pieces > 2  # the name first, then the arguments in pieces
    assert calls[0]["id"] and calls[0]["name"] == "get_weather"
    arguments = json.loads(calls[0]["arguments"])
    _assert_schema("get_weather", arguments)
    assert finish == "stop"

    assistant: ChatCompletionAssistantMessageParam = {
        "role": "assistant", "content": None, "tool_calls": [
            {"id": calls[0]["id"], "type": "function",
             "function": {"name": "get_weather", "arguments": calls[0]["arguments"]}}]}
    result: ChatCompletionToolMessageParam = {
        "role": "tool", "tool_call_id": calls[0]["id"], "content": "21 degrees"}
    follow_up = client.chat.completions.create(
        model=name, messages=[*MESSAGES, assistant, result], tools=CHAT_TOOLS, max_tokens=4,
        temperature=0, extra_body={"ignore_eos": True})
    assert follow_up.usage is not None and follow_up.usage.completion_tokens == 4

    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(vllm_deepseek_v3.model_dir))
    # vLLM hands the template the arguments parsed into a dict (vLLM 0.32:
    # vllm/renderers/chat_utils.py, _postprocess_messages); so does this rendering.
    parsed = json.loads(json.dumps(assistant))
    parsed["tool_calls"][0]["function"]["arguments"] = arguments
    text = tokenizer.apply_chat_template([*MESSAGES, parsed, result], tools=TOOLS, tokenize=False,
                                         add_generation_prompt=True)
    assert f"21 degrees{TOOL_OUTPUT_END_TOKEN}{TOOL_OUTPUTS_END_TOKEN}<think>\n" in text
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert follow_up.usage.prompt_tokens == len(ids)


# ---------------------------------------------------------------------------------------------
# vLLM's own benchmark client


def test_vllm_bench_serve(vllm_deepseek_v3: VllmServer, tmp_path: Path) -> None:
    server = vllm_deepseek_v3
    assert server.api_key
    before = server_counters(server)
    num_prompts, output_len = 4, 3
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    # vllm bench serve sends OPENAI_API_KEY as the bearer token (vLLM 0.32:
    # vllm/benchmarks/lib/endpoint_request_func.py).
    env.update(OPENAI_API_KEY=server.api_key, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", TMPDIR=str(tmp_path))
    for proxy in ("http_proxy", "https_proxy", "all_proxy"):
        env.pop(proxy, None)
        env.pop(proxy.upper(), None)
    command = [str(vllm_python()), "-m", "vllm.entrypoints.cli.main", "bench", "serve",
               "--backend", "openai-chat", "--base-url", server.url,
               "--endpoint", "/v1/chat/completions", "--model", server.served_name,
               "--tokenizer", str(server.model_dir), "--dataset-name", "random",
               "--random-input-len", "16", "--random-output-len", str(output_len),
               "--num-prompts", str(num_prompts), "--max-concurrency", "2", "--ignore-eos",
               "--seed", "0", "--disable-tqdm", "--save-result", "--result-dir", str(tmp_path),
               "--result-filename", "bench.json"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert server.api_key not in proc.stdout + proc.stderr
    data = json.loads((tmp_path / "bench.json").read_text(encoding="utf-8"))
    assert data["backend"] == "openai-chat"
    assert data["model_id"] == server.served_name
    assert data["num_prompts"] == num_prompts
    assert data["completed"] == num_prompts
    assert data["failed"] == 0
    assert data["total_output_tokens"] == num_prompts * output_len  # --ignore-eos
    assert data["total_input_tokens"] > 0
    assert data["request_throughput"] > 0 and data["mean_ttft_ms"] > 0
    # The server counted the same requests and tokens: vllm bench serve sends no ready check and
    # no warmups by default (vllm/benchmarks/serve.py: --ready-check-timeout-sec 0,
    # --num-warmups 0), and for openai-chat it reports the prompt tokens the server's usage
    # gives, chat template included (vllm/benchmarks/lib/endpoint_request_func.py,
    # async_request_openai_chat_completions).
    expected = {"vllm:request_success": num_prompts,
                "vllm:generation_tokens": data["total_output_tokens"],
                "vllm:prompt_tokens": data["total_input_tokens"]}
    assert settled_counter_delta(server, before, expected) == expected
