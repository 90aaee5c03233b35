"""Tiny random DeepSeek-family models: `ascend-serve model make-tiny`, loaded by transformers.

Each architecture is built once per session (seconds each) through the CLI. Tests that need
torch/transformers skip where the ``models`` extra is not installed.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ascend_serve.cli.main import app
from ascend_serve.serving.manifest import MANIFEST_NAME, load, verify
from ascend_serve.serving.tiny_model import (
    ARCHS,
    ASSISTANT_TOKEN,
    BOS_TOKEN,
    EOS_TOKEN,
    PAD_TOKEN,
    SPECIAL_TOKENS,
    THINK_TOKEN,
    TOOL_CALL_BEGIN_TOKEN,
    TOOL_CALL_END_TOKEN,
    TOOL_CALLS_BEGIN_TOKEN,
    TOOL_CALLS_END_TOKEN,
    TOOL_OUTPUT_BEGIN_TOKEN,
    TOOL_OUTPUT_END_TOKEN,
    TOOL_OUTPUTS_BEGIN_TOKEN,
    TOOL_OUTPUTS_END_TOKEN,
    TOOL_SEP_TOKEN,
    TOOL_TOKENS,
    USER_TOKEN,
    VOCAB_SIZE,
)

runner = CliRunner()

# head_dim values vLLM's CPU attention kernels take (16 passes /health, then kills the engine).
CPU_HEAD_DIMS = {32, 64, 80, 96, 112, 128}
EXPECTED_FILES = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                  "tokenizer_config.json"]
ARCHITECTURES = {"deepseek_v3": "DeepseekV3ForCausalLM", "deepseek_v2": "DeepseekV2ForCausalLM",
                 "qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every architecture, built once through the CLI."""
    for module in ("torch", "transformers", "tokenizers", "safetensors"):
        pytest.importorskip(module)
    root = tmp_path_factory.mktemp("tiny")
    built: dict[str, Path] = {}
    for arch in ARCHS:
        out = root / arch
        result = runner.invoke(app, ["model", "make-tiny", "--arch", arch, str(out), "--json"])
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert report["arch"] == arch
        assert report["architectures"] == [ARCHITECTURES[arch]]
        built[arch] = out
    return built


@pytest.fixture(scope="session")
def transformers_mod() -> Any:
    return pytest.importorskip("transformers")


def _config(model_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize("arch", ARCHS)
def test_directory_is_small_complete_and_verified(tiny_models: dict[str, Path], arch: str) -> None:
    model_dir = tiny_models[arch]
    assert sorted(p.name for p in model_dir.iterdir()) == sorted([*EXPECTED_FILES, MANIFEST_NAME])
    manifest = load(model_dir)
    assert manifest.name == f"tiny-{arch}"
    assert [f.path for f in manifest.files] == EXPECTED_FILES
    assert verify(model_dir, manifest) == []
    assert 1_000_000 < manifest.total_size < 20_000_000
    for path in model_dir.iterdir():
        assert path.stat().st_mode & 0o044 == 0o044, f"{path.name} not readable by others"


@pytest.mark.parametrize("arch", ARCHS)
def test_shapes_fit_vllm_cpu_kernels(tiny_models: dict[str, Path], arch: str) -> None:
    config = _config(tiny_models[arch])
    assert config["model_type"] == arch
    assert config["architectures"] == [ARCHITECTURES[arch]]
    assert config["num_hidden_layers"] == 2
    assert config["max_position_embeddings"] >= 2048
    assert 1000 <= config["vocab_size"] <= 2048
    assert (config["bos_token_id"], config["eos_token_id"]) == (0, 1)
    if arch in ("qwen2", "llama"):
        head_dim = config["hidden_size"] // config["num_attention_heads"]
        assert head_dim in CPU_HEAD_DIMS
        assert config.get("head_dim", head_dim) == head_dim
        return
    # MLA + MoE
    assert config["kv_lora_rank"] == 512
    assert config["qk_rope_head_dim"] == 64
    assert config["qk_nope_head_dim"] + config["qk_rope_head_dim"] in CPU_HEAD_DIMS
    assert config["n_shared_experts"] == 1
    assert 2 <= config["n_routed_experts"] <= 8
    assert config["first_k_dense_replace"] < config["num_hidden_layers"]  # a MoE layer exists
    if arch == "deepseek_v3":
        assert config["topk_method"] == "noaux_tc"
        assert config["scoring_func"] == "sigmoid"


def test_moe_layer_has_experts_and_v3_bias_is_float32(tiny_models: dict[str, Path]) -> None:
    safetensors = pytest.importorskip("safetensors")
    with safetensors.safe_open(str(tiny_models["deepseek_v3"] / "model.safetensors"),
                               "np") as weights:
        keys = set(weights.keys())
        assert "model.layers.1.mlp.gate.e_score_correction_bias" in keys
        assert weights.get_slice("model.layers.1.mlp.gate.e_score_correction_bias"
                                 ).get_dtype() == "F32"
        assert weights.get_slice("model.embed_tokens.weight").get_dtype() == "BF16"
    assert "model.layers.1.mlp.experts.3.down_proj.weight" in keys
    assert "model.layers.1.mlp.shared_experts.up_proj.weight" in keys
    assert "model.layers.0.mlp.up_proj.weight" in keys  # the dense first layer


@pytest.mark.parametrize("arch", ARCHS)
def test_transformers_loads_and_generates(
    tiny_models: dict[str, Path], transformers_mod: Any, arch: str
) -> None:
    torch = pytest.importorskip("torch")
    model_dir = str(tiny_models[arch])
    model = transformers_mod.AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = transformers_mod.AutoTokenizer.from_pretrained(model_dir)
    assert type(model).__name__ == ARCHITECTURES[arch]
    assert model.dtype == torch.bfloat16
    inputs = tokenizer("The quick brown fox", return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits
        assert logits.shape == (1, inputs["input_ids"].shape[1], model.config.vocab_size)
        assert torch.isfinite(logits).all()
        out = model.generate(**inputs, max_new_tokens=4, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 4
    assert isinstance(tokenizer.decode(out[0]), str)


def test_tokenizer_round_trips_and_has_deepseek_tokens(
    tiny_models: dict[str, Path], transformers_mod: Any
) -> None:
    tokenizer = transformers_mod.AutoTokenizer.from_pretrained(str(tiny_models["deepseek_v3"]))
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == (
        BOS_TOKEN, EOS_TOKEN, PAD_TOKEN)
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1)
    for token_id, token in enumerate(SPECIAL_TOKENS):
        assert tokenizer.convert_tokens_to_ids(token) == token_id
        assert tokenizer.encode(token, add_special_tokens=False) == [token_id]
    assert len(tokenizer) == _config(tiny_models["deepseek_v3"])["vocab_size"]
    for text in ("Hello, world! 17 * 23 = 391", "深度求索 \uff5c unseen-wörds ✓ \t\n  spaces",
                 f"{THINK_TOKEN}\nreasoning</think>answer"):
        ids = tokenizer.encode(text)
        assert ids[0] == tokenizer.bos_token_id  # BOS added, as DeepSeek's tokenizer does
        assert tokenizer.decode(ids, skip_special_tokens=True) == text
    # <think> stays visible when special tokens are skipped; the turn markers do not.
    ids = tokenizer.encode(f"{USER_TOKEN}hi{ASSISTANT_TOKEN}{THINK_TOKEN}",
                           add_special_tokens=False)
    assert tokenizer.decode(ids, skip_special_tokens=True) == f"hi{THINK_TOKEN}"
    # Same tokenizer for every architecture.
    first = (tiny_models["deepseek_v3"] / "tokenizer.json").read_bytes()
    assert all((tiny_models[a] / "tokenizer.json").read_bytes() == first for a in ARCHS)


def test_chat_template_is_deepseek_r1(tiny_models: dict[str, Path], transformers_mod: Any) -> None:
    model_dir = tiny_models["qwen2"]
    config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert ASSISTANT_TOKEN in config["chat_template"]
    tokenizer = transformers_mod.AutoTokenizer.from_pretrained(str(model_dir))
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\n2+2 is 4.\n</think>\n\n4"},
        {"role": "user", "content": "And 3+3?"},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        f"{BOS_TOKEN}Be brief.{USER_TOKEN}What is 2+2?{ASSISTANT_TOKEN}\n\n4{EOS_TOKEN}"
        f"{USER_TOKEN}And 3+3?{ASSISTANT_TOKEN}{THINK_TOKEN}\n"
    )
    without = tokenizer.apply_chat_template(messages[:2], tokenize=False)
    assert without.endswith("What is 2+2?")


def test_tool_tokens_are_single_visible_tokens_after_the_vocabulary(
    tiny_models: dict[str, Path], transformers_mod: Any
) -> None:
    tokenizer = transformers_mod.AutoTokenizer.from_pretrained(str(tiny_models["deepseek_v3"]))
    assert len(TOOL_TOKENS) == len(set(TOOL_TOKENS)) == 9
    ids = [tokenizer.convert_tokens_to_ids(token) for token in TOOL_TOKENS]
    assert ids == list(range(VOCAB_SIZE, VOCAB_SIZE + len(TOOL_TOKENS)))
    assert len(tokenizer) == VOCAB_SIZE + len(TOOL_TOKENS)
    call = (f"{TOOL_CALLS_BEGIN_TOKEN}{TOOL_CALL_BEGIN_TOKEN}function{TOOL_SEP_TOKEN}get_time\n"
            f"```json\n{{\"zone\": \"utc\"}}\n```{TOOL_CALL_END_TOKEN}{TOOL_CALLS_END_TOKEN}")
    encoded = tokenizer.encode(call, add_special_tokens=False)
    for token in (TOOL_CALLS_BEGIN_TOKEN, TOOL_CALL_BEGIN_TOKEN, TOOL_SEP_TOKEN,
                  TOOL_CALL_END_TOKEN, TOOL_CALLS_END_TOKEN):
        assert encoded.count(tokenizer.convert_tokens_to_ids(token)) == 1
    # Visible like <think>: a parser reading the decoded text (skip_special_tokens, as vLLM
    # decodes by default) still finds them; the turn markers are skipped.
    assert tokenizer.decode(encoded, skip_special_tokens=True) == call
    outputs = f"{TOOL_OUTPUTS_BEGIN_TOKEN}{TOOL_OUTPUT_BEGIN_TOKEN}12:00{TOOL_OUTPUT_END_TOKEN}" \
              f"{TOOL_OUTPUTS_END_TOKEN}"
    ids = tokenizer.encode(f"{USER_TOKEN}{outputs}{ASSISTANT_TOKEN}", add_special_tokens=False)
    assert tokenizer.decode(ids, skip_special_tokens=True) == outputs


TOOLS = [{"type": "function", "function": {
    "name": "get_time", "description": "Time now",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string",
                                                             "enum": ["utc", "local"]}},
                   "required": ["zone"]}}}]


def test_chat_template_renders_tools_calls_and_results(
    tiny_models: dict[str, Path], transformers_mod: Any
) -> None:
    tokenizer = transformers_mod.AutoTokenizer.from_pretrained(str(tiny_models["deepseek_v3"]))
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Time in UTC and here?"},
        # vLLM hands the template parsed arguments (a dict); OpenAI clients send a JSON string.
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_time", "arguments": {"zone": "utc"}}},
            {"id": "c2", "type": "function",
             "function": {"name": "get_time", "arguments": '{"zone": "local"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
        {"role": "tool", "tool_call_id": "c2", "content": "14:00"},
        {"role": "assistant", "content": "<think>\nadd two\n</think>\n\n12:00 and 14:00."},
        {"role": "user", "content": "Thanks!"},
    ]
    text = tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False,
                                         add_generation_prompt=True)
    tools_json = json.dumps(TOOLS[0], ensure_ascii=False)

    def call(arguments: str) -> str:
        return (f"{TOOL_CALL_BEGIN_TOKEN}function{TOOL_SEP_TOKEN}get_time\n```json\n{arguments}"
                f"\n```{TOOL_CALL_END_TOKEN}")

    utc, local = '{"zone": "utc"}', '{"zone": "local"}'
    assert text == (
        f"{BOS_TOKEN}Be brief.\n\n## Tools\n\nCall them with {TOOL_CALLS_BEGIN_TOKEN}"
        f"{TOOL_CALL_BEGIN_TOKEN}function{TOOL_SEP_TOKEN}NAME\n```json\nARGUMENTS\n```"
        f"{TOOL_CALL_END_TOKEN}{TOOL_CALLS_END_TOKEN}:\n{tools_json}"
        f"{USER_TOKEN}Time in UTC and here?"
        f"{ASSISTANT_TOKEN}{TOOL_CALLS_BEGIN_TOKEN}{call(utc)}\n"
        f"{call(local)}{TOOL_CALLS_END_TOKEN}{EOS_TOKEN}"
        f"{TOOL_OUTPUTS_BEGIN_TOKEN}{TOOL_OUTPUT_BEGIN_TOKEN}12:00{TOOL_OUTPUT_END_TOKEN}\n"
        f"{TOOL_OUTPUT_BEGIN_TOKEN}14:00{TOOL_OUTPUT_END_TOKEN}{TOOL_OUTPUTS_END_TOKEN}"
        f"\n\n12:00 and 14:00.{EOS_TOKEN}"  # the answer after the results: no new turn marker
        f"{USER_TOKEN}Thanks!{ASSISTANT_TOKEN}{THINK_TOKEN}\n"
    )
    # Right after tool results, the generation prompt continues the assistant's turn.
    after_results = tokenizer.apply_chat_template(messages[:5], tools=TOOLS, tokenize=False,
                                                  add_generation_prompt=True)
    assert after_results.endswith(f"14:00{TOOL_OUTPUT_END_TOKEN}{TOOL_OUTPUTS_END_TOKEN}"
                                  f"{THINK_TOKEN}\n")
    # No tools, no tools section: a plain chat renders as before.
    plain = tokenizer.apply_chat_template(messages[:2], tokenize=False,
                                          add_generation_prompt=True)
    assert plain == f"{BOS_TOKEN}Be brief.{USER_TOKEN}Time in UTC and here?{ASSISTANT_TOKEN}" \
                    f"{THINK_TOKEN}\n"
    # A tools prompt without a system prompt starts with the tools section.
    no_system = tokenizer.apply_chat_template(messages[1:2], tools=TOOLS, tokenize=False)
    assert no_system.startswith(f"{BOS_TOKEN}## Tools\n\n")


def test_generation_config(tiny_models: dict[str, Path]) -> None:
    data = json.loads((tiny_models["llama"] / "generation_config.json").read_text())
    assert (data["bos_token_id"], data["eos_token_id"]) == (0, 1)
    assert data["do_sample"] is True and data["temperature"] == 0.6


# --- CLI: make-tiny ----------------------------------------------------------------------------


def test_make_tiny_refuses_non_empty_out(tiny_models: dict[str, Path]) -> None:
    out = tiny_models["llama"]
    before = (out / MANIFEST_NAME).read_bytes()
    result = runner.invoke(app, ["model", "make-tiny", "--arch", "llama", str(out)])
    assert result.exit_code == 2
    assert "not empty" in result.stderr and "--force" in result.stderr
    assert (out / MANIFEST_NAME).read_bytes() == before


def test_make_tiny_force_replaces_and_is_deterministic(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "llama"
    shutil.copytree(tiny_models["llama"], out)
    (out / "stale.bin").write_bytes(b"old")
    result = runner.invoke(app, ["model", "make-tiny", "--arch", "llama", str(out), "--force"])
    assert result.exit_code == 0, result.output
    assert not (out / "stale.bin").exists()
    # Same arch and seed: byte-identical files.
    assert load(out) == load(tiny_models["llama"])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no scratch left


def test_make_tiny_bad_usage_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["model", "make-tiny", "--arch", "gpt2", str(tmp_path / "m")])
    assert result.exit_code == 2
    assert "deepseek_v3" in result.stderr
    a_file = tmp_path / "file"
    a_file.write_text("x")
    result = runner.invoke(app, ["model", "make-tiny", "--arch", "llama", str(a_file)])
    assert result.exit_code == 2
    assert "not a directory" in result.stderr
    assert not (tmp_path / "m").exists()


def test_make_tiny_without_the_models_extra_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    result = runner.invoke(app, ["model", "make-tiny", "--arch", "llama", str(tmp_path / "m")])
    assert result.exit_code == 2
    assert "ascend-serve[models]" in result.stderr and "torch" in result.stderr
    assert not (tmp_path / "m").exists()


def test_verify_of_a_corrupted_tiny_model_exits_1(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    model_dir = tmp_path / "v2"
    shutil.copytree(tiny_models["deepseek_v2"], model_dir)
    weights = model_dir / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    result = runner.invoke(app, ["model", "verify", str(model_dir)])
    assert result.exit_code == 1, result.output
    assert "model.safetensors" in result.stdout and "sha256" in result.stdout
    result = runner.invoke(app, ["model", "verify", str(tiny_models["deepseek_v2"])])
    assert result.exit_code == 0, result.output
