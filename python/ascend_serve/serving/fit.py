"""Will a vLLM serving profile fit in NPU memory? Weights + KV cache per chip, with numbers.

A serving profile is a model (its Hugging Face ``config.json``, as a dict), a parallel layout
(tensor parallel, data parallel, expert parallel) and vLLM's memory arguments
(``--max-model-len``, ``--max-num-seqs``, ``--gpu-memory-utilization``). :func:`estimate` counts
the model's parameters from its config (:func:`param_count`), places them on the chips the way
vLLM shards them, adds the KV cache of one ``max_model_len`` sequence
(:func:`kv_bytes_per_token`) and compares the sum with the chip's HBM. A profile that cannot fit
is refused with a one-sentence reason that carries the numbers, and :func:`suggest` names a
tensor-parallel size, W8A8 quantization or a shorter ``max_model_len`` that would fit.

Assumptions (an estimate, not a profiler; all sizes in GiB = 2**30 bytes):

* HBM per chip: what the node's chips report, where the caller read it (``hbm_gib``, from the
  ``HBM-Usage(MB)`` total of ``npu-smi info``; :data:`HBM_GIB` is only the nominal value of the
  profile's chip, for an estimate without a node: Atlas A2 910B 64 GiB (8 chips a node), 910B4
  32 GiB, Atlas A3 910C 64 GiB per chip (16 chips a node). npu-smi prints 65536 MB for 910B3 and
  A3 chips and 32768 MB for 910B4 (corpus npu-smi: a2-910b3-24.1.rc1-procs-java,
  a3-25.0.rc1-16chip, a2-910b4-25.0.rc1.1-8card), so "64 GB" is 64 GiB.
* vLLM may use ``hbm × gpu_memory_utilization`` of a chip (the *budget*). Out of it come the
  weights, a fixed ``overhead_gib`` allowance for activations, workspaces, HCCL buffers and the
  graph pool (3 GiB by default; vLLM measures this with a profiling run, it is not computed from
  the model here), and the KV cache gets the rest.
* vLLM refuses to start unless the KV cache holds at least one full ``max_model_len`` sequence;
  that is the fit criterion. How many full-length sequences fit at once is reported next to
  ``max_num_seqs`` (fewer means requests queue or are preempted under load, not a failure).
* Sharding follows vLLM: embedding and lm_head are vocab-parallel and attention / dense MLP /
  shared experts are split over the tensor-parallel ranks; RMSNorm weights, the MoE router and
  MLA's latent down-projections (``q_a_proj``, ``kv_a_proj_with_mqa``) are replicated on every
  rank; a GQA rank holds ``ceil(num_key_value_heads / tp)`` KV heads' projections. Routed experts
  are split over ``EP = tp × dp`` ranks with expert parallelism, else over the TP ranks like dense
  weights. Every data-parallel rank holds its own copy of the non-expert weights.
* Weight dtypes: bf16/fp16 2 bytes a parameter, fp32 4, W8A8 1 byte for the linear layers
  (``--quantization ascend``, msModelSlim weights) while embedding, lm_head, norms and the router
  stay in bf16 as msModelSlim leaves them; per-channel scales are ignored.
* KV cache: MLA (DeepSeek-V2/V3) caches the compressed latent (``kv_lora_rank +
  qk_rope_head_dim`` values a token a layer) and every TP rank holds all of it; GQA (Llama,
  Qwen2) caches K and V for ``ceil(num_key_value_heads / tp)`` heads on each rank.
* DeepSeek-V3.2 (``deepseek_v32``) is V3 plus DeepSeek sparse attention: a lightning indexer per
  layer (``wq_b`` from the query latent to ``index_n_heads × index_head_dim``, ``wk`` to
  ``index_head_dim``, its LayerNorm and ``weights_proj`` to ``index_n_heads``; replicated on every
  TP rank) whose keys are cached next to the MLA latent (``index_head_dim`` values a token a layer,
  counted at the KV dtype). Sparse attention reads 2048 cached tokens a step; it stores all of
  them, so the cache per token grows and does not shrink.
* DeepSeek-V4 (``deepseek_v4``: compressed attention C4A/C128A, mHC, hash-routed layers) is not
  modelled: :func:`estimate` raises :class:`NotEstimableError` saying so, and callers report
  "not estimated" instead of a number. W4A8 weights count half a byte for the linear layers.

Only the standard library and pydantic are imported.
"""

# Reasons and summaries write budgets as "64 GiB × 0.92": the multiplication sign is on purpose.
# ruff: noqa: RUF001, RUF002, RUF003

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "DTYPE_BYTES",
    "HBM_GIB",
    "KV_DTYPE_BYTES",
    "NODE_CHIPS",
    "NOT_ESTIMABLE_MODEL_TYPES",
    "SUPPORTED_MODEL_TYPES",
    "TP_SIZES",
    "FitError",
    "FitReport",
    "NotEstimableError",
    "ParamCount",
    "ProfileSizes",
    "chip_hbm_gib",
    "estimate",
    "kv_bytes_per_token",
    "param_count",
    "suggest",
    "weights_bytes_per_chip",
]

GIB = 1 << 30

HBM_GIB: dict[str, float] = {"910B": 64, "910B4": 32, "910C": 64}
"""HBM per chip in GiB, by chip name."""

NODE_CHIPS: dict[str, int] = {"910B": 8, "910B4": 8, "910C": 16}
"""Chips in one server: Atlas 800T/800I A2 (910B, 910B4) 8, Atlas 800 A3 (910C) 16."""

DTYPE_BYTES: dict[str, float] = {"bf16": 2, "fp16": 2, "fp32": 4, "w8a8": 1, "w4a8": 0.5}
"""Bytes a weight parameter, by ``weight_dtype`` (W8A8: linear layers; see the module notes)."""

KV_DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp32": 4, "int8": 1}
"""Bytes a cached K/V value, by ``kv_dtype``."""

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "deepseek_v2", "deepseek_v3", "deepseek_v32")
MLA_MODEL_TYPES = ("deepseek_v2", "deepseek_v3", "deepseek_v32")
NOT_ESTIMABLE_MODEL_TYPES: dict[str, str] = {
    "deepseek_v4": "DeepSeek-V4's compressed attention (C4A/C128A caches, mHC, hash-routed MoE "
                   "layers) is not modelled here, and its public config.json values are not "
                   "known to this tool",
}
"""Architectures the estimate knows it cannot size, with the reason it says."""
TP_SIZES = (1, 2, 4, 8, 16)
"""Tensor-parallel sizes :func:`suggest` tries."""

# vLLM allocates KV blocks of 128 tokens on Ascend; a suggested max_model_len is a multiple.
_BLOCK_TOKENS = 128


class FitError(ValueError):
    """Bad input: an unsupported architecture, a missing config key, an unknown chip or dtype."""


class NotEstimableError(FitError):
    """A known architecture whose memory layout the estimate does not model (DeepSeek-V4)."""


def chip_hbm_gib(chip: str) -> float:
    """HBM of one ``chip`` in GiB (``910B``, ``910B4``, ``910C``; case-insensitive).

    Raises:
        FitError: for any other chip (``cpu`` included: pass ``hbm_gib`` to :func:`estimate`).
    """
    for name, gib in HBM_GIB.items():
        if chip.upper() == name:
            return gib
    raise FitError(
        f"unknown chip {chip!r}: known chips are {', '.join(HBM_GIB)}; "
        "for any other device (cpu) pass hbm_gib"
    )


class ParamCount(BaseModel):
    """Parameters of a model, split the way vLLM shards them.

    ``total`` is the sum of the parts; ``active`` counts the routed experts only as
    ``num_experts_per_tok / n_routed_experts`` of them (the parameters one token uses).
    ``replicated`` is the part of ``attention`` + ``router`` + ``norms`` that every
    tensor-parallel rank holds whole. DeepSeek-V3's multi-token-prediction layers
    (``num_nextn_predict_layers``) are not counted: vLLM loads them only for speculative decoding;
    ``mtp_layers`` says how many the checkpoint has.
    """

    model_config = ConfigDict(frozen=True)

    model_type: str
    embedding: int
    """Input embedding plus lm_head (once if tied)."""
    attention: int
    """Attention projections (and their biases) of all layers."""
    dense_mlp: int
    """MLPs of the dense layers (all layers for Llama / Qwen2)."""
    experts: int
    """Routed experts of all MoE layers."""
    shared_experts: int
    """Shared experts of all MoE layers."""
    router: int
    """MoE gate weights (and DeepSeek-V3's score-correction bias)."""
    norms: int
    """RMSNorm weights."""
    replicated: int
    """Parameters every TP rank holds whole: norms, router, MLA latent down-projections."""
    n_routed_experts: int
    """Routed experts a MoE layer (0 for dense models)."""
    total: int
    active: int
    mtp_layers: int = 0


def _get(
    config: Mapping[str, Any], key: str, default: Any = None, *, required: bool = False
) -> Any:
    """``config[key]``; a missing (or null) required key raises :class:`FitError` naming it."""
    value = config.get(key)
    if value is None:
        if required:
            model_type = config.get("model_type", "?")
            raise FitError(f"config.json of model_type {model_type!r} lacks {key!r}")
        return default
    return value


def _int(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    """An integer config value; required when ``default`` is None."""
    value = _get(config, key, default, required=default is None)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FitError(f"config.json key {key!r} must be an integer, got {value!r}")
    return value


def _model_type(config: Mapping[str, Any]) -> str:
    """The config's ``model_type``, checked against :data:`SUPPORTED_MODEL_TYPES`."""
    model_type = config.get("model_type")
    if model_type is None:
        raise FitError("config.json lacks 'model_type'")
    if model_type in NOT_ESTIMABLE_MODEL_TYPES:
        raise NotEstimableError(f"memory fit not estimated for model_type {model_type!r}: "
                                f"{NOT_ESTIMABLE_MODEL_TYPES[model_type]}")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise FitError(
            f"unsupported model_type {model_type!r}: supported are "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    return str(model_type)


def _gqa_shape(config: Mapping[str, Any]) -> tuple[int, int, int]:
    """(attention heads, KV heads, head_dim) of a Llama / Qwen2 config."""
    heads = _int(config, "num_attention_heads")
    kv_heads = _int(config, "num_key_value_heads", heads)
    hidden = _int(config, "hidden_size")
    head_dim = _int(config, "head_dim", hidden // heads)
    return heads, kv_heads, head_dim


def _gqa_kv_proj(config: Mapping[str, Any]) -> int:
    """Parameters of the k_proj + v_proj (with biases) of all layers of a GQA model."""
    _, kv_heads, head_dim = _gqa_shape(config)
    hidden = _int(config, "hidden_size")
    has_bias = config.get("model_type") == "qwen2" or bool(config.get("attention_bias", False))
    per_layer = 2 * kv_heads * head_dim * (hidden + (1 if has_bias else 0))
    return per_layer * _int(config, "num_hidden_layers")


def _embedding(config: Mapping[str, Any]) -> int:
    vocab = _int(config, "vocab_size")
    hidden = _int(config, "hidden_size")
    tied = bool(config.get("tie_word_embeddings", False))
    return vocab * hidden * (1 if tied else 2)


def _count_gqa(config: Mapping[str, Any], model_type: str) -> ParamCount:
    hidden = _int(config, "hidden_size")
    layers = _int(config, "num_hidden_layers")
    intermediate = _int(config, "intermediate_size")
    heads, _, head_dim = _gqa_shape(config)
    qwen2 = model_type == "qwen2"
    # q and o projections; q has a bias in Qwen2 (and in Llama with attention_bias), o only in
    # Llama with attention_bias.
    attn_bias = bool(config.get("attention_bias", False))
    q_o = 2 * hidden * heads * head_dim
    q_o += heads * head_dim * (1 if qwen2 or attn_bias else 0) + hidden * (1 if attn_bias else 0)
    attention = q_o * layers + _gqa_kv_proj(config)
    mlp_bias = 2 * intermediate + hidden if bool(config.get("mlp_bias", False)) else 0
    dense_mlp = (3 * hidden * intermediate + mlp_bias) * layers
    norms = hidden * (2 * layers + 1)
    embedding = _embedding(config)
    total = embedding + attention + dense_mlp + norms
    return ParamCount(
        model_type=model_type, embedding=embedding, attention=attention, dense_mlp=dense_mlp,
        experts=0, shared_experts=0, router=0, norms=norms, replicated=norms,
        n_routed_experts=0, total=total, active=total,
    )


def _count_mla(config: Mapping[str, Any], model_type: str) -> ParamCount:
    hidden = _int(config, "hidden_size")
    layers = _int(config, "num_hidden_layers")
    heads = _int(config, "num_attention_heads")
    q_lora = config.get("q_lora_rank")
    kv_lora = _int(config, "kv_lora_rank")
    nope = _int(config, "qk_nope_head_dim")
    rope = _int(config, "qk_rope_head_dim")
    v_dim = _int(config, "v_head_dim")

    # MLA per layer. Replicated on TP ranks in vLLM: q_a_proj and kv_a_proj_with_mqa.
    latent = hidden * (kv_lora + rope)  # kv_a_proj_with_mqa
    if q_lora is None:
        q = hidden * heads * (nope + rope)  # q_proj
        norms_attn = kv_lora  # kv_a_layernorm
    else:
        q_lora = _int(config, "q_lora_rank")
        latent += hidden * q_lora  # q_a_proj
        q = q_lora * heads * (nope + rope)  # q_b_proj
        norms_attn = kv_lora + q_lora  # kv_a_layernorm, q_a_layernorm
    split = q + kv_lora * heads * (nope + v_dim) + heads * v_dim * hidden  # kv_b_proj, o_proj
    if model_type == "deepseek_v32":  # the lightning indexer, replicated like the latent
        index_heads = _int(config, "index_n_heads")
        index_dim = _int(config, "index_head_dim")
        q_in = _int(config, "q_lora_rank")
        latent += q_in * index_heads * index_dim + hidden * index_dim + hidden * index_heads
        norms_attn += 2 * index_dim  # the indexer's k LayerNorm (weight and bias)
    attention = (latent + split) * layers
    latent_total = latent * layers

    n_routed = _int(config, "n_routed_experts", 0)
    n_shared = _int(config, "n_shared_experts", 0)
    first_dense = _int(config, "first_k_dense_replace", 0)
    freq = _int(config, "moe_layer_freq", 1)
    if freq < 1:
        raise FitError(f"config.json key 'moe_layer_freq' must be at least 1, got {freq}")
    moe_layers = 0
    if n_routed:
        moe_layers = sum(1 for i in range(layers) if i >= first_dense and i % freq == 0)
    dense_layers = layers - moe_layers

    dense_mlp = 3 * hidden * _int(config, "intermediate_size") * dense_layers if dense_layers else 0
    experts = shared = router = 0
    if moe_layers:
        moe_inter = _int(config, "moe_intermediate_size")
        per_expert = 3 * hidden * moe_inter
        experts = n_routed * per_expert * moe_layers
        shared = n_shared * per_expert * moe_layers
        gate_bias = n_routed if config.get("topk_method", "") == "noaux_tc" else 0
        router = (n_routed * hidden + gate_bias) * moe_layers
    norms = (2 * hidden + norms_attn) * layers + hidden
    embedding = _embedding(config)
    total = embedding + attention + dense_mlp + experts + shared + router + norms
    active = total - experts
    if n_routed and moe_layers:
        top_k = _int(config, "num_experts_per_tok")
        active += experts * min(top_k, n_routed) // n_routed
    return ParamCount(
        model_type=model_type, embedding=embedding, attention=attention, dense_mlp=dense_mlp,
        experts=experts, shared_experts=shared, router=router, norms=norms,
        replicated=latent_total + router + norms, n_routed_experts=n_routed if moe_layers else 0,
        total=total, active=active, mtp_layers=_int(config, "num_nextn_predict_layers", 0),
    )


def param_count(config: Mapping[str, Any]) -> ParamCount:
    """Count a model's parameters from its Hugging Face ``config.json``.

    Supports ``llama`` and ``qwen2`` (GQA: ``num_key_value_heads``, ``head_dim`` defaulting to
    ``hidden_size / num_attention_heads``, Qwen2's q/k/v biases, ``tie_word_embeddings``) and
    ``deepseek_v2`` / ``deepseek_v3`` (MLA with ``q_lora_rank`` possibly null, MoE with
    ``n_routed_experts``, ``n_shared_experts``, ``moe_intermediate_size``,
    ``first_k_dense_replace``, ``moe_layer_freq``). DeepSeek-V3/R1's multi-token-prediction
    layers (``num_nextn_predict_layers``, about 14B parameters in R1) are left out of the count;
    the 671B of DeepSeek-V3 is the model without them.

    Raises:
        FitError: for another ``model_type`` or a missing key (named in the message).
    """
    model_type = _model_type(config)
    if model_type in MLA_MODEL_TYPES:
        return _count_mla(config, model_type)
    return _count_gqa(config, model_type)


def kv_bytes_per_token(
    config: Mapping[str, Any], kv_dtype_bytes: int = 2, tensor_parallel: int = 1
) -> int:
    """Bytes of KV cache one token takes on each chip, over all layers.

    MLA (``deepseek_v2``/``deepseek_v3``): ``kv_lora_rank + qk_rope_head_dim`` values a layer,
    the same on every TP rank (the latent is not split). GQA (``llama``/``qwen2``):
    ``2 × ceil(num_key_value_heads / tensor_parallel) × head_dim`` values a layer (a rank holds
    at least one KV head; vLLM replicates heads when TP exceeds them).
    """
    if tensor_parallel < 1:
        raise FitError(f"tensor_parallel must be at least 1, got {tensor_parallel}")
    model_type = _model_type(config)
    layers = _int(config, "num_hidden_layers")
    if model_type in MLA_MODEL_TYPES:
        per_layer = _int(config, "kv_lora_rank") + _int(config, "qk_rope_head_dim")
        if model_type == "deepseek_v32":
            per_layer += _int(config, "index_head_dim")  # the indexer's cached keys
    else:
        _, kv_heads, head_dim = _gqa_shape(config)
        per_layer = 2 * math.ceil(kv_heads / tensor_parallel) * head_dim
    return per_layer * layers * kv_dtype_bytes


def weights_bytes_per_chip(
    config: Mapping[str, Any],
    *,
    tensor_parallel: int,
    data_parallel: int = 1,
    expert_parallel: bool = False,
    weight_dtype: str = "bf16",
    counts: ParamCount | None = None,
) -> float:
    """Bytes of weights on each chip for a layout and weight dtype (see the module notes)."""
    if tensor_parallel < 1 or data_parallel < 1:
        raise FitError(f"tensor_parallel ({tensor_parallel}) and data_parallel ({data_parallel}) "
                       "must be at least 1")
    counts = param_count(config) if counts is None else counts
    wbytes = _dtype_bytes(weight_dtype, DTYPE_BYTES, "weight_dtype")
    # W8A8 quantizes linear layers only: embedding, lm_head, norms, router stay bf16.
    float_bytes = 2 if weight_dtype == "w8a8" else wbytes
    tp = tensor_parallel

    replicated_linear = counts.replicated - counts.norms - counts.router
    kv_proj = _gqa_kv_proj(config) if counts.model_type not in MLA_MODEL_TYPES else 0
    split_linear = (counts.attention - replicated_linear - kv_proj + counts.dense_mlp
                    + counts.shared_experts)
    per_chip = float_bytes * (counts.embedding / tp + counts.norms + counts.router)
    per_chip += wbytes * (split_linear / tp + replicated_linear)
    if kv_proj:
        _, kv_heads, _ = _gqa_shape(config)
        per_chip += wbytes * kv_proj * math.ceil(kv_heads / tp) / kv_heads
    if counts.experts:
        ranks = tp * data_parallel if expert_parallel else tp
        n = counts.n_routed_experts
        # Each EP rank holds ceil(n / EP) whole experts; without EP every expert is TP-split.
        share = math.ceil(n / ranks) / n if expert_parallel else 1 / ranks
        per_chip += wbytes * counts.experts * share
    return float(per_chip)


def _dtype_bytes(dtype: str, table: Mapping[str, Any], what: str) -> Any:
    try:
        return table[dtype]
    except KeyError:
        raise FitError(f"unknown {what} {dtype!r}: choose one of {', '.join(table)}") from None


class FitReport(BaseModel):
    """The verdict on one serving profile: sizes per chip in GiB (2 decimals)."""

    fits: bool
    model_type: str
    chip: str
    hbm_gib: float
    hbm_source: str = "nominal"
    """Where ``hbm_gib`` comes from: ``nominal`` (the chip's :data:`HBM_GIB`) or what the caller
    named (``npu-smi on <host>``, a CPU profile's ``memory_gib``)."""
    gpu_memory_utilization: float
    budget_gib: float
    params_total: int
    weights_gib_per_chip: float
    overhead_gib: float
    kv_bytes_per_token: int
    """KV cache of one token on one chip, in bytes."""
    kv_gib_per_sequence: float
    """KV cache of one ``max_model_len``-token sequence on one chip."""
    free_for_kv_gib: float
    """Budget left for the KV cache after weights and overhead (negative: weights overflow)."""
    full_sequences: int
    """Full ``max_model_len`` sequences the KV cache holds at once (per DP rank)."""
    max_model_len: int
    max_num_seqs: int
    tensor_parallel: int
    data_parallel: int
    expert_parallel: bool
    chips: int
    """Chips available (defaults to ``tensor_parallel × data_parallel``)."""
    weight_dtype: str
    kv_dtype: str
    reason: str
    """Why it does not fit, with the numbers; a short summary when it fits."""
    suggestion: str | None = None
    note: str | None = None
    """A caveat on a profile that fits (fewer full-length sequences than ``max_num_seqs``)."""

    def as_text(self) -> str:
        """A short human summary, several lines."""
        layout = f"tensor parallel {self.tensor_parallel}"
        if self.data_parallel > 1:
            layout += f" × data parallel {self.data_parallel}"
        if self.expert_parallel:
            layout += ", expert parallel"
        lines = [
            f"{self.model_type} on {self.chip}: {'fits' if self.fits else 'does NOT fit'}",
            f"  layout   {layout}; weights {self.weight_dtype}, KV cache {self.kv_dtype}",
            f"  params   {self.params_total / 1e9:.2f}B; weights {self.weights_gib_per_chip:.2f}"
            f" GiB per chip + {self.overhead_gib:.2f} GiB overhead",
            f"  budget   {self.budget_gib:.2f} GiB ({self.hbm_gib:g} GiB ×"
            f" {self.gpu_memory_utilization:g}); {self.free_for_kv_gib:.2f} GiB free for KV",
            f"  KV       {self.kv_gib_per_sequence:.2f} GiB per {self.max_model_len}-token"
            f" sequence; room for {_plural(self.full_sequences, 'full-length sequence')} at once"
            f" (max_num_seqs {self.max_num_seqs})",
        ]
        if not self.fits:
            lines.append(f"  reason   {self.reason}")
        if self.suggestion:
            lines.append(f"  suggest  {self.suggestion}")
        if self.note:
            lines.append(f"  note     {self.note}")
        return "\n".join(lines)


def _device(chip: str) -> str:
    return "the cpu host" if chip.lower() == "cpu" else f"a {chip} chip"


class _Verdict(BaseModel):
    """A report plus the unrounded numbers and the kind of problem :func:`suggest` works from."""

    report: FitReport
    free_gib: float
    overhead_gib: float
    problem: str | None
    """None (fits), ``chips``, ``heads``, ``weights`` or ``kv``."""


class _RequiredSizes(TypedDict):
    chip: str
    tensor_parallel: int
    max_model_len: int
    max_num_seqs: int


class ProfileSizes(_RequiredSizes, total=False):
    """The keyword arguments of :func:`estimate` and :func:`suggest`: a serving profile's layout
    and vLLM's memory arguments.

    * ``chip``: ``910B``, ``910B4``, ``910C``, or any name (``cpu``) together with ``hbm_gib``.
    * ``tensor_parallel``, ``data_parallel``: vLLM's ``--tensor-parallel-size`` and
      ``--data-parallel-size`` (default 1).
    * ``expert_parallel``: ``--enable-expert-parallel`` (routed experts over ``tp × dp`` ranks).
    * ``weight_dtype``: ``bf16`` (default), ``fp16``, ``fp32`` or ``w8a8`` (``--quantization
      ascend``).
    * ``kv_dtype``: ``bf16`` (default), ``fp16``, ``fp32`` or ``int8``.
    * ``max_model_len``, ``max_num_seqs``, ``gpu_memory_utilization`` (default 0.9): vLLM's
      arguments.
    * ``hbm_gib``: memory of one device in GiB, as the node reports it; defaults to the chip's
      nominal HBM (:data:`HBM_GIB`).
    * ``hbm_source``: where ``hbm_gib`` was read (``npu-smi on node-a``), named in the reason.
    * ``overhead_gib``: allowance for activations and workspaces per chip (an assumption; default
      3.0).
    * ``chips``: chips available in total (defaults to ``tp × dp``); bounds :func:`suggest`.
    """

    data_parallel: int
    expert_parallel: bool
    weight_dtype: str
    kv_dtype: str
    gpu_memory_utilization: float
    hbm_gib: float | None
    hbm_source: str | None
    overhead_gib: float
    chips: int | None


def _evaluate(
    config: Mapping[str, Any],
    *,
    chip: str,
    tensor_parallel: int,
    data_parallel: int = 1,
    expert_parallel: bool = False,
    weight_dtype: str = "bf16",
    kv_dtype: str = "bf16",
    max_model_len: int,
    max_num_seqs: int,
    gpu_memory_utilization: float = 0.9,
    hbm_gib: float | None = None,
    hbm_source: str | None = None,
    overhead_gib: float = 3.0,
    chips: int | None = None,
) -> _Verdict:
    """:func:`estimate` without the suggestion; the defaults of :class:`ProfileSizes`."""
    for name, value in (("tensor_parallel", tensor_parallel), ("data_parallel", data_parallel),
                        ("max_model_len", max_model_len), ("max_num_seqs", max_num_seqs)):
        if value < 1:
            raise FitError(f"{name} must be at least 1, got {value}")
    if chips is not None and chips < 1:
        raise FitError(f"chips must be at least 1, got {chips}")
    if not 0 < gpu_memory_utilization <= 1:
        raise FitError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if overhead_gib < 0:
        raise FitError(f"overhead_gib must not be negative, got {overhead_gib}")
    hbm = chip_hbm_gib(chip) if hbm_gib is None else float(hbm_gib)
    if hbm <= 0:
        raise FitError(f"hbm_gib must be positive, got {hbm_gib}")
    kv_bytes = _dtype_bytes(kv_dtype, KV_DTYPE_BYTES, "kv_dtype")

    counts = param_count(config)
    weights = weights_bytes_per_chip(
        config, tensor_parallel=tensor_parallel, data_parallel=data_parallel,
        expert_parallel=expert_parallel, weight_dtype=weight_dtype, counts=counts,
    ) / GIB
    budget = hbm * gpu_memory_utilization
    kv_token = kv_bytes_per_token(config, kv_bytes, tensor_parallel)
    if kv_token <= 0:
        raise FitError(f"the KV cache of a token comes to {kv_token} bytes: check the config")
    kv_seq = kv_token * max_model_len / GIB
    free = budget - weights - overhead_gib
    full = max(0, math.floor(free / kv_seq))
    needed = tensor_parallel * data_parallel
    available = needed if chips is None else chips
    heads = _int(config, "num_attention_heads")
    device = _device(chip)
    source = (hbm_source or "given") if hbm_gib is not None else "nominal"
    budget_text = f"the {budget:.2f} GiB budget ({hbm:g} GiB × {gpu_memory_utilization:g}"
    budget_text += ")" if source in ("given", "nominal") else f"; HBM per chip from {source})"

    problem: str | None
    note = None
    if needed > available:
        problem = "chips"
        reason = (f"tensor parallel {tensor_parallel} × data parallel {data_parallel} needs "
                  f"{needed} chips but {available} are available")
    elif heads % tensor_parallel:
        problem = "heads"
        reason = (f"num_attention_heads {heads} is not divisible by tensor parallel "
                  f"{tensor_parallel}, which vLLM requires")
    elif free < 0:
        problem = "weights"
        reason = (f"weights {weights:.2f} GiB per chip + {overhead_gib:.2f} GiB overhead exceed "
                  f"{budget_text} of {device}")
    elif full < 1:
        problem = "kv"
        reason = (f"the KV cache of one {max_model_len}-token sequence needs {kv_seq:.2f} GiB "
                  f"per chip but only {free:.2f} GiB of {budget_text} of {device} is left after "
                  f"{weights:.2f} GiB of weights and {overhead_gib:.2f} GiB overhead")
    else:
        problem = None
        reason = (f"weights {weights:.2f} GiB + {overhead_gib:.2f} GiB overhead per chip leave "
                  f"{free:.2f} GiB of {budget_text} for KV: "
                  f"{_plural(full, f'full {max_model_len}-token sequence')}")
        if full < max_num_seqs:
            note = (f"only {full} of max_num_seqs {max_num_seqs} full {max_model_len}-token "
                    "sequences fit at once; requests queue or are preempted under full load")

    report = FitReport(
        fits=problem is None, model_type=counts.model_type, chip=chip, hbm_gib=round(hbm, 2),
        hbm_source=source,
        gpu_memory_utilization=gpu_memory_utilization, budget_gib=round(budget, 2),
        params_total=counts.total, weights_gib_per_chip=round(weights, 2),
        overhead_gib=round(overhead_gib, 2), kv_bytes_per_token=kv_token,
        kv_gib_per_sequence=round(kv_seq, 2),
        free_for_kv_gib=round(free, 2), full_sequences=full, max_model_len=max_model_len,
        max_num_seqs=max_num_seqs, tensor_parallel=tensor_parallel, data_parallel=data_parallel,
        expert_parallel=expert_parallel, chips=available, weight_dtype=weight_dtype,
        kv_dtype=kv_dtype, reason=reason, note=note,
    )
    return _Verdict(report=report, free_gib=free, overhead_gib=overhead_gib, problem=problem)


def estimate(config: Mapping[str, Any], **sizes: Unpack[ProfileSizes]) -> FitReport:
    """Estimate whether a vLLM serving profile fits, per chip; suggest a fix when it does not.

    ``config`` is the model's Hugging Face ``config.json`` as a dict; the keyword arguments are
    the profile's layout and sizes (:class:`ProfileSizes`).

    Raises:
        FitError: on bad input (unknown chip without ``hbm_gib``, unsupported model, missing
            config key, unknown dtype, non-positive sizes).
    """
    report = _evaluate(config, **sizes).report
    if report.fits:
        return report
    return report.model_copy(update={"suggestion": suggest(config, **sizes)})


def suggest(config: Mapping[str, Any], **sizes: Unpack[ProfileSizes]) -> str | None:
    """What would make a profile fit, in words; None when it already fits.

    Tried in order: the smallest tensor-parallel size in :data:`TP_SIZES` above the current one
    that divides ``num_attention_heads``, fits on ``chips`` (data parallel shrinks to
    ``chips // tp`` when ``tp × dp`` would exceed them) and fits with the same dtypes; then W8A8
    weights at the current or a larger TP; then a shorter ``max_model_len`` when only the KV
    cache is short; else how many GiB of weights the model needs.
    """
    current = _evaluate(config, **sizes)
    if current.problem is None:
        return None
    heads = _int(config, "num_attention_heads")
    asked = current.report  # the sizes, defaults filled in
    tensor_parallel, data_parallel = asked.tensor_parallel, asked.data_parallel
    weight_dtype, kv_dtype = asked.weight_dtype, asked.kv_dtype
    chips, available = sizes.get("chips"), asked.chips

    def layouts(min_tp: int) -> list[tuple[int, int]]:
        """(tp, dp) candidates from ``min_tp`` up that vLLM accepts on the available chips."""
        out = []
        for tp in TP_SIZES:
            if tp < min_tp or heads % tp:
                continue
            dp = data_parallel if chips is None else min(data_parallel, chips // tp)
            if dp >= 1:
                out.append((tp, dp))
        return out

    def layout_text(tp: int, dp: int) -> str:
        if dp == 1:
            return f"tensor parallel {tp}"
        return f"tensor parallel {tp} × data parallel {dp} on {tp * dp} chips"

    def fitting(tp: int, dp: int, dtype: str) -> FitReport | None:
        other: ProfileSizes = {**sizes, "tensor_parallel": tp, "data_parallel": dp,
                               "weight_dtype": dtype}
        verdict = _evaluate(config, **other)
        return verdict.report if verdict.problem is None else None

    def fits_text(report: FitReport) -> str:
        return (f"{report.weights_gib_per_chip:.2f} GiB of weights per chip, "
                f"{_plural(report.full_sequences, 'full-length sequence')}")

    for tp, dp in layouts(tensor_parallel + 1):
        report = fitting(tp, dp, weight_dtype)
        if report:
            return f"use {layout_text(tp, dp)} ({fits_text(report)})"
    if weight_dtype != "w8a8":
        for tp, dp in layouts(tensor_parallel):
            report = fitting(tp, dp, "w8a8")
            if report:
                return (f"use W8A8 weights (--quantization ascend) with {layout_text(tp, dp)} "
                        f"({fits_text(report)})")
    if current.problem == "kv":
        kv_bytes = kv_bytes_per_token(config, _dtype_bytes(kv_dtype, KV_DTYPE_BYTES, "kv_dtype"),
                                      tensor_parallel)
        tokens = int(current.free_gib * GIB // kv_bytes)
        if tokens >= _BLOCK_TOKENS:
            tokens -= tokens % _BLOCK_TOKENS
        if tokens >= 1:
            return (f"lower max_model_len to {tokens} (the KV cache has room for {tokens} "
                    "tokens per chip)")
    widest = max([tp * dp for tp, dp in layouts(1)] + [available])
    room = asked.budget_gib - current.overhead_gib
    needs = weights_bytes_per_chip(config, tensor_parallel=1, weight_dtype=weight_dtype) / GIB
    text = f"does not fit on {_plural(widest, 'chip')}: needs about {needs:.0f} GiB of "
    text += f"{weight_dtype} weights"
    if weight_dtype != "w8a8":
        w8a8 = weights_bytes_per_chip(config, tensor_parallel=1, weight_dtype="w8a8") / GIB
        text += f" ({w8a8:.0f} GiB in W8A8)"
    if room > 0:
        text += f", with {room:.2f} GiB per chip left for weights and KV"
    return text


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
