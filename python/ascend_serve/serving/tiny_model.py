"""Tiny random models of the DeepSeek family, built offline in seconds.

The models have real architectures (DeepSeek-V3 and V2 with MLA + MoE; Qwen2 and Llama, the
bases of the R1 distills) with random weights, a byte-level BPE tokenizer trained here on local
text, DeepSeek's special and tool-call tokens and a chat template in DeepSeek-R1's format that
carries tools, tool calls and tool results. They load in ``transformers``
and serve with vLLM on CPUs, so the serving path can be tested without downloading a model.
Their output is noise.

Shapes follow what vLLM's CPU kernels accept: attention head_dim 64 (never 16), MLA with
kv_lora_rank 512 and qk_rope_head_dim 64, DeepSeek-V3 with ``topk_method="noaux_tc"``.

Only the standard library is imported at module level; ``torch``, ``transformers`` and
``tokenizers`` (the ``models`` extra) are imported by :func:`build_tiny_model`.
"""

# DeepSeek's special tokens are spelled with fullwidth bars and U+2581 on purpose, and the
# corpus holds Chinese punctuation: RUF001/RUF003 do not apply; S105 takes *_TOKEN for secrets.
# ruff: noqa: RUF001, RUF003, S105

from __future__ import annotations

import dataclasses
import importlib
import json
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascend_serve.serving.manifest import Manifest, build_manifest, write

ARCHS = ("deepseek_v3", "deepseek_v2", "qwen2", "llama")
MODELS_EXTRA = "models"

BOS_TOKEN = "<｜begin▁of▁sentence｜>"
EOS_TOKEN = "<｜end▁of▁sentence｜>"
PAD_TOKEN = "<｜▁pad▁｜>"
USER_TOKEN = "<｜User｜>"
ASSISTANT_TOKEN = "<｜Assistant｜>"
THINK_TOKEN = "<think>"
END_THINK_TOKEN = "</think>"
# Ids 0..6 in this order: bos 0 and eos 1 as in DeepSeek's own tokenizers.
SPECIAL_TOKENS = (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN, USER_TOKEN, ASSISTANT_TOKEN, THINK_TOKEN,
                  END_THINK_TOKEN)
# DeepSeek-V3/R1's tool-call tokens, spelled as vLLM 0.32's deepseek_v3 tool parser
# (vllm/tool_parsers/deepseekv3_tool_parser.py) and xgrammar 0.2.8's "deepseek_r1" structural tag
# (xgrammar/builtin_structural_tag.py, get_deepseek_r1_structural_tag) spell them. A call is
# <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```
# <｜tool▁call▁end｜>… <｜tool▁calls▁end｜> (calls separated by "\n"); tool results are
# <｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>RESULT<｜tool▁output▁end｜>…<｜tool▁outputs▁end｜>.
TOOL_CALLS_BEGIN_TOKEN = "<｜tool▁calls▁begin｜>"
TOOL_CALLS_END_TOKEN = "<｜tool▁calls▁end｜>"
TOOL_CALL_BEGIN_TOKEN = "<｜tool▁call▁begin｜>"
TOOL_CALL_END_TOKEN = "<｜tool▁call▁end｜>"
TOOL_SEP_TOKEN = "<｜tool▁sep｜>"
TOOL_OUTPUTS_BEGIN_TOKEN = "<｜tool▁outputs▁begin｜>"
TOOL_OUTPUTS_END_TOKEN = "<｜tool▁outputs▁end｜>"
TOOL_OUTPUT_BEGIN_TOKEN = "<｜tool▁output▁begin｜>"
TOOL_OUTPUT_END_TOKEN = "<｜tool▁output▁end｜>"
# Added after the trained vocabulary (ids VOCAB_SIZE.. in this order), so the ids of every
# other token do not depend on them.
TOOL_TOKENS = (TOOL_CALLS_BEGIN_TOKEN, TOOL_CALLS_END_TOKEN, TOOL_CALL_BEGIN_TOKEN,
               TOOL_CALL_END_TOKEN, TOOL_SEP_TOKEN, TOOL_OUTPUTS_BEGIN_TOKEN,
               TOOL_OUTPUTS_END_TOKEN, TOOL_OUTPUT_BEGIN_TOKEN, TOOL_OUTPUT_END_TOKEN)
# <think>, </think> and the tool tokens stay visible in decoded text (not "special"), as in
# DeepSeek-R1, so the reasoning parser and the tool parser (which read the decoded text) can find
# them; the others are skipped by skip_special_tokens.
VISIBLE_ADDED_TOKENS = (THINK_TOKEN, END_THINK_TOKEN, *TOOL_TOKENS)

VOCAB_SIZE = 1024
HIDDEN_SIZE = 256
NUM_HEADS = 4  # head_dim 64
NUM_LAYERS = 2
MAX_POSITIONS = 4096

# A chat template in DeepSeek-R1's format (written for these models, not DeepSeek's own text):
# system prompts first, then the offered tools (``tools``, one JSON object a line, with how to
# call them); <｜User｜> and <｜Assistant｜> turns; earlier answers without their reasoning; an
# assistant's ``tool_calls`` in DeepSeek's tool-call syntax (arguments as given when a string,
# as JSON when vLLM passed them parsed); ``tool`` messages as one tool-outputs block per run of
# results, after which the assistant's next answer continues without a new <｜Assistant｜>; and
# a generation prompt that opens the reasoning with "<think>\n".
# Short: the tiny tokenizer spends about one token per two characters of JSON, and the tiny
# serving profile has a 512-token context.
_TOOLS_PROMPT = (
    "## Tools\n\nCall them with " + TOOL_CALLS_BEGIN_TOKEN + TOOL_CALL_BEGIN_TOKEN + "function"
    + TOOL_SEP_TOKEN + "NAME\n```json\nARGUMENTS\n```" + TOOL_CALL_END_TOKEN + TOOL_CALLS_END_TOKEN
    + ":"
)
CHAT_TEMPLATE = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}"
    "{% endif %}"
    "{% set ns = namespace(system_prompt='', after_tool=false) %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}"
    "{% set ns.system_prompt = ns.system_prompt + message['content'] %}"
    "{%- endif %}{%- endfor %}"
    "{%- if tools %}"
    "{% if ns.system_prompt %}{% set ns.system_prompt = ns.system_prompt + '\\n\\n' %}{% endif %}"
    "{% set ns.system_prompt = ns.system_prompt + " + json.dumps(_TOOLS_PROMPT, ensure_ascii=False)
    + " %}"
    "{%- for tool in tools %}"
    "{% set ns.system_prompt = ns.system_prompt + '\\n' + (tool | tojson) %}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{ bos_token }}{{ ns.system_prompt }}"
    "{%- for message in messages %}"
    "{%- if message['role'] != 'tool' and ns.after_tool %}"
    "{{ '" + TOOL_OUTPUTS_END_TOKEN + "' }}"
    "{%- endif %}"
    "{%- if message['role'] == 'user' %}"
    "{{ '<｜User｜>' + message['content'] }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{% set content = message['content'] or '' %}"
    "{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"
    "{% if not ns.after_tool %}{{ '<｜Assistant｜>' }}{% endif %}"
    "{{ content }}"
    "{%- if message['tool_calls'] %}"
    "{{ '" + TOOL_CALLS_BEGIN_TOKEN + "' }}"
    "{%- for call in message['tool_calls'] %}"
    "{% set arguments = call['function']['arguments'] %}"
    "{% if not loop.first %}{{ '\\n' }}{% endif %}"
    "{{ '" + TOOL_CALL_BEGIN_TOKEN + "' + (call['type'] or 'function') + '" + TOOL_SEP_TOKEN
    + "' + call['function']['name'] + '\\n```json\\n' }}"
    "{% if arguments is string %}{{ arguments }}{% else %}{{ arguments | tojson }}{% endif %}"
    "{{ '\\n```" + TOOL_CALL_END_TOKEN + "' }}"
    "{%- endfor %}"
    "{{ '" + TOOL_CALLS_END_TOKEN + "' }}"
    "{%- endif %}"
    "{{ '<｜end▁of▁sentence｜>' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{% if not ns.after_tool %}{{ '" + TOOL_OUTPUTS_BEGIN_TOKEN + "' }}"
    "{% else %}{{ '\\n' }}{% endif %}"
    "{{ '" + TOOL_OUTPUT_BEGIN_TOKEN + "' + message['content'] + '" + TOOL_OUTPUT_END_TOKEN
    + "' }}"
    "{%- endif %}"
    "{% set ns.after_tool = message['role'] == 'tool' %}"
    "{%- endfor %}"
    "{%- if ns.after_tool %}{{ '" + TOOL_OUTPUTS_END_TOKEN + "' }}{% endif %}"
    "{% if add_generation_prompt %}"
    "{% if not ns.after_tool %}{{ '<｜Assistant｜>' }}{% endif %}{{ '<think>\\n' }}"
    "{% endif %}"
)

_CORPUS = """\
DeepSeek-V3 is a Mixture-of-Experts language model with 671B total parameters, of which 37B are
activated for each token. It adopts Multi-head Latent Attention (MLA) and the DeepSeekMoE
architecture. DeepSeek-R1 is trained to reason step by step before it answers: its answer opens
with <think> and the reasoning ends with </think>, after which the final answer follows.
vLLM is a fast and easy-to-use library for LLM inference and serving. It manages attention key
and value memory with PagedAttention, batches incoming requests continuously, and exposes an
OpenAI-compatible HTTP server with /v1/completions and /v1/chat/completions endpoints.
Ascend NPUs are programmed with CANN; the driver and firmware come from the HDK. A Kunpeng server
holds eight Ascend 910B chips linked by HCCS; npu-smi info shows their health, memory and power.
Ansible roles install the driver, the toolkit, the kernels and the Python stack on every node, and
a preflight role checks the hosts before a deployment starts. The model store holds the weights on
every node, and a manifest with SHA-256 sums proves that a copy is complete and intact.
def fibonacci(n: int) -> int:
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a

{"model": "deepseek-ai/DeepSeek-R1", "messages": [{"role": "user", "content": "Hello!"}],
 "max_tokens": 128, "temperature": 0.6, "top_p": 0.95, "stream": false}
{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather
 in a city.", "parameters": {"type": "object", "properties": {"city": {"type": "string",
 "description": "The name of the city"}, "unit": {"type": "string", "enum": ["celsius",
 "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": false}, "strict": true}}
{"type": "function", "function": {"name": "get_time", "description": "Get the current time.",
 "parameters": {"type": "object", "properties": {"zone": {"type": "string", "enum": ["utc",
 "local"]}}, "required": ["zone"], "additionalProperties": false}, "strict": false}}
{"tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather",
 "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}], "tool_choice": "auto"}
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.
深度求索的模型在昇腾处理器上运行。请一步一步地思考，然后给出答案。你好，世界！
Question: what is 17 times 23? Let me think. 17 times 20 is 340, and 17 times 3 is 51, so the
answer is 391. Question: how many seconds are in a day? 24 times 60 times 60 is 86400.
"""

_WORDS = (
    "the", "model", "server", "request", "token", "expert", "layer", "attention", "cache",
    "memory", "batch", "latency", "throughput", "prompt", "answer", "reason", "think", "step",
    "node", "cluster", "chip", "driver", "firmware", "kernel", "version", "install", "deploy",
    "check", "verify", "weight", "tensor", "matrix", "vector", "parallel", "pipeline",
    "sequence", "length", "number", "first", "second", "third", "because", "therefore",
    "however", "while", "when", "which", "quantization", "inference", "training", "gradient",
    "optimizer", "scheduler", "router", "gate", "shared", "routed", "rotary", "position",
    "embedding", "vocabulary", "decoder", "encoder", "softmax", "sigmoid", "normalization",
    "residual", "projection", "latent", "compression", "precision", "bfloat", "float",
    "integer", "accuracy", "benchmark", "container", "image", "playbook", "inventory",
    "variable", "template", "handler", "service", "socket", "network", "address", "storage",
    "checksum", "manifest", "download", "upload", "mirror", "package", "repository", "release",
    "question", "problem", "solution", "example", "result", "output", "input", "value",
    "function", "method", "class", "simple", "small", "large", "fast", "slow", "early", "late",
    "every", "other", "same", "different", "important", "possible",
)
_SUFFIXES = ("", "", "", "s", "ed", "ing", "er", "ly", "ness", "tion")
_PUNCTUATION = (".", ".", "!", "?", ";", ":")

@dataclass(frozen=True)
class TinyModelInfo:
    """What :func:`build_tiny_model` made."""

    arch: str
    name: str
    path: Path
    architectures: list[str]
    parameters: int
    vocab_size: int
    manifest: Manifest


class MissingDependencyError(ImportError):
    """A package of the ``models`` extra is not installed."""


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"building tiny models needs the {MODELS_EXTRA!r} extra ({module} is missing): "
            f"pip install 'ascend-serve[{MODELS_EXTRA}]'"
        ) from exc


def training_text(seed: int = 0) -> str:
    """The tokenizer's training text: a fixed corpus plus seeded sentences (about 125 KB)."""
    rng = random.Random(seed)
    lines = [_CORPUS]
    for i in range(1200):
        words = [w + rng.choice(_SUFFIXES) for w in rng.choices(_WORDS, k=rng.randint(5, 14))]
        sentence = " ".join(words).capitalize()
        lines.append(f"{i}. {sentence} ({rng.randint(0, 99999)}){rng.choice(_PUNCTUATION)}")
    return "\n".join(lines)


def build_tokenizer(seed: int = 0, vocab_size: int = VOCAB_SIZE) -> Any:
    """A byte-level BPE ``tokenizers.Tokenizer`` with DeepSeek's special tokens at ids 0..6.

    ``vocab_size`` is the trained vocabulary; DeepSeek's tool tokens follow it (ids
    ``vocab_size .. vocab_size + len(TOOL_TOKENS) - 1``).
    """
    tk = _require("tokenizers")
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                          use_regex=True)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_text(seed).splitlines(keepends=True), trainer=trainer)
    # The trainer gave all seven ids 0..6 as special tokens; <think> and </think> become
    # ordinary added tokens (add_tokens updates the flag), and the tool tokens are appended as
    # ordinary added tokens (ids vocab_size.., in TOOL_TOKENS order).
    tokenizer.add_special_tokens([tk.AddedToken(t, special=True, normalized=False)
                                  for t in SPECIAL_TOKENS if t not in VISIBLE_ADDED_TOKENS])
    tokenizer.add_tokens([tk.AddedToken(t, special=False, normalized=False)
                          for t in VISIBLE_ADDED_TOKENS])
    bos_id = tokenizer.token_to_id(BOS_TOKEN)
    # Like DeepSeek's tokenizers: BOS in front of every encoded text (add_special_tokens=True).
    tokenizer.post_processor = tk.processors.Sequence([
        tk.processors.ByteLevel(trim_offsets=False),
        tk.processors.TemplateProcessing(
            single=f"{BOS_TOKEN} $A",
            pair=f"{BOS_TOKEN} $A {BOS_TOKEN} $B:1",
            special_tokens=[(BOS_TOKEN, bos_id)],
        ),
    ])
    return tokenizer


def _tokenizer_config() -> dict[str, Any]:
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_POSITIONS,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
    }


def model_config_kwargs(arch: str, vocab_size: int) -> dict[str, Any]:
    """The ``transformers`` config of the tiny model of ``arch`` (also used by tests)."""
    common: dict[str, Any] = {
        "vocab_size": vocab_size,
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": 512,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": NUM_HEADS,
        "max_position_embeddings": MAX_POSITIONS,
        "bos_token_id": SPECIAL_TOKENS.index(BOS_TOKEN),
        "eos_token_id": SPECIAL_TOKENS.index(EOS_TOKEN),
        "pad_token_id": SPECIAL_TOKENS.index(PAD_TOKEN),
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
    }
    if arch in ("qwen2", "llama"):
        return {**common, "num_key_value_heads": 2, "head_dim": HIDDEN_SIZE // NUM_HEADS}
    # MLA + MoE. Layer 0 is dense, layer 1 is MoE with 4 routed experts and 1 shared one.
    moe: dict[str, Any] = {
        **common,
        "num_key_value_heads": NUM_HEADS,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 64,
        "v_head_dim": 64,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 128,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "n_group": 1,
        "topk_group": 1,
    }
    if arch == "deepseek_v3":
        return {**moe, "q_lora_rank": 128, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
                "norm_topk_prob": True, "routed_scaling_factor": 2.5, "num_nextn_predict_layers": 0}
    if arch == "deepseek_v2":
        return {**moe, "q_lora_rank": None, "topk_method": "greedy", "scoring_func": "softmax",
                "norm_topk_prob": False, "routed_scaling_factor": 1.0}
    raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHS)}")


def _generation_config() -> dict[str, Any]:
    # DeepSeek-R1's recommended sampling.
    return {
        "bos_token_id": SPECIAL_TOKENS.index(BOS_TOKEN),
        "eos_token_id": SPECIAL_TOKENS.index(EOS_TOKEN),
        "pad_token_id": SPECIAL_TOKENS.index(PAD_TOKEN),
        "do_sample": True,
        "temperature": 0.6,
        "top_p": 0.95,
    }


def build_tiny_model(arch: str, out: Path, seed: int = 0, name: str | None = None) -> TinyModelInfo:
    """Build the tiny model of ``arch`` into the directory ``out`` (created; should be empty).

    Same arch and seed, same bytes: random init and tokenizer training are seeded.
    """
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHS)}")
    torch = _require("torch")
    transformers = _require("transformers")
    _require("safetensors")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model_name = name or f"tiny-{arch}"

    tokenizer = build_tokenizer(seed)
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(_tokenizer_config(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    vocab_size = int(tokenizer.get_vocab_size())

    config = transformers.AutoConfig.for_model(arch, **model_config_kwargs(arch, vocab_size))
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.eval()
    for module in model.modules():  # float32 in DeepSeek-V3's own checkpoints too
        bias = getattr(module, "e_score_correction_bias", None)
        if isinstance(bias, torch.Tensor):
            bias.data = bias.data.float()
    model.generation_config = transformers.GenerationConfig(**_generation_config())
    bars = transformers.utils.logging
    bars_were_on = bars.is_progress_bar_enabled()
    bars.disable_progress_bar()  # no "Writing model shards" bar on stderr
    try:
        model.save_pretrained(str(out), safe_serialization=True)
    finally:
        if bars_were_on:
            bars.enable_progress_bar()
    parameters = int(sum(p.numel() for p in model.parameters()))

    for path in out.iterdir():  # save_pretrained writes 0600 weights; others serve them
        path.chmod(0o644)
    manifest = build_manifest(out, model_name)
    write(out, manifest)
    return TinyModelInfo(
        arch=arch,
        name=model_name,
        path=out,
        architectures=list(config.architectures or [type(model).__name__]),
        parameters=parameters,
        vocab_size=vocab_size,
        manifest=manifest,
    )


def build_tiny_model_in_place(arch: str, out: Path, seed: int = 0,
                              name: str | None = None) -> TinyModelInfo:
    """:func:`build_tiny_model` into a scratch directory beside ``out``, moved in place at the
    end: never a half-built ``out``. Whatever ``out`` held is replaced (the caller decides
    whether it may be)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        info = build_tiny_model(arch, scratch, seed=seed, name=name)
        if out.is_dir() and any(out.iterdir()):
            shutil.rmtree(out)
        elif out.exists():
            out.rmdir()
        scratch.rename(out)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
    return dataclasses.replace(info, path=out)
