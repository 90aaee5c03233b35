"""The memory-fit estimator: parameter counts, KV cache sizes, fit verdicts and suggestions."""

# The estimator writes budgets as "64 GiB × 0.92"; the tests look for that text.
# ruff: noqa: RUF001, RUF003

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest

from ascend_serve.serving.fit import (
    GIB,
    HBM_GIB,
    FitError,
    FitReport,
    chip_hbm_gib,
    estimate,
    kv_bytes_per_token,
    param_count,
    suggest,
    weights_bytes_per_chip,
)

DEEPSEEK_V3: dict[str, Any] = {
    "model_type": "deepseek_v3",
    "vocab_size": 129280,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "tie_word_embeddings": False,
    "topk_method": "noaux_tc",
    "num_nextn_predict_layers": 1,
}
# DeepSeek-R1 has DeepSeek-V3's architecture and config.
DEEPSEEK_R1 = DEEPSEEK_V3
DEEPSEEK_V2_LITE: dict[str, Any] = {
    "model_type": "deepseek_v2",
    "vocab_size": 102400,
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "n_shared_experts": 2,
    "n_routed_experts": 64,
    "num_experts_per_tok": 6,
    "first_k_dense_replace": 1,
    "q_lora_rank": None,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "tie_word_embeddings": False,
}
DEEPSEEK_V2 = {**DEEPSEEK_V2_LITE, "hidden_size": 5120, "intermediate_size": 12288,
               "moe_intermediate_size": 1536, "num_hidden_layers": 60,
               "num_attention_heads": 128, "num_key_value_heads": 128, "n_routed_experts": 160,
               "q_lora_rank": 1536}


def _dense(model_type: str, vocab: int, hidden: int, intermediate: int, layers: int, heads: int,
           kv_heads: int) -> dict[str, Any]:
    """A dense model's config.json: the fields fit reads."""
    return {"model_type": model_type, "vocab_size": vocab, "hidden_size": hidden,
            "intermediate_size": intermediate, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv_heads,
            "tie_word_embeddings": False}


# Dense models: type, vocabulary, hidden, intermediate, layers, attention heads, KV heads.
QWEN_32B = _dense("qwen2", 152064, 5120, 27648, 64, 40, 8)
QWEN_7B = _dense("qwen2", 152064, 3584, 18944, 28, 28, 4)
QWEN_1_5B = _dense("qwen2", 151936, 1536, 8960, 28, 12, 2)
LLAMA_8B = _dense("llama", 128256, 4096, 14336, 32, 32, 8)
LLAMA_70B = _dense("llama", 128256, 8192, 28672, 80, 64, 8)

# A tiny DeepSeek-V3: layer 0 dense, layers 1-2 MoE with 8 routed experts and 1 shared.
TINY_V3: dict[str, Any] = {
    "model_type": "deepseek_v3", "vocab_size": 1000, "hidden_size": 64,
    "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 4, "n_shared_experts": 1,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
    "q_lora_rank": 32, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 16,
    "v_head_dim": 16, "tie_word_embeddings": False, "topk_method": "noaux_tc",
    "n_group": 1, "topk_group": 1,
}

# R1 on one Atlas A3 node: 16 chips as DP 4 × TP 4 with expert parallelism.
A3_NODE: dict[str, Any] = {
    "chip": "910C", "tensor_parallel": 4, "data_parallel": 4, "expert_parallel": True,
    "max_model_len": 16384, "max_num_seqs": 16, "gpu_memory_utilization": 0.92,
}


def suggested_tp(suggestion: str | None) -> int:
    """The tensor-parallel size a suggestion names."""
    assert suggestion is not None
    match = re.search(r"tensor parallel (\d+)", suggestion)
    assert match, suggestion
    return int(match.group(1))


# --- parameter counts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "expected", "tolerance"),
    [
        (DEEPSEEK_V3, 671e9, 0.015),
        (DEEPSEEK_V2, 236e9, 0.01),
        (DEEPSEEK_V2_LITE, 15.7e9, 0.01),
        (QWEN_32B, 32.8e9, 0.02),
        (QWEN_7B, 7.6e9, 0.01),
        (QWEN_1_5B, 1.78e9, 0.01),
        (LLAMA_8B, 8.03e9, 0.005),
        (LLAMA_70B, 70.6e9, 0.005),
    ],
    ids=["DeepSeek-V3", "DeepSeek-V2", "DeepSeek-V2-Lite", "Distill-Qwen-32B",
         "Distill-Qwen-7B", "Distill-Qwen-1.5B", "Distill-Llama-8B", "Distill-Llama-70B"],
)
def test_param_count_matches_published_size(
    config: dict[str, Any], expected: float, tolerance: float
) -> None:
    assert param_count(config).total == pytest.approx(expected, rel=tolerance)


@pytest.mark.parametrize(
    ("config", "exact"),
    [(LLAMA_8B, 8_030_261_248), (LLAMA_70B, 70_553_706_496), (QWEN_32B, 32_763_876_352),
     (QWEN_7B, 7_615_616_512), (QWEN_1_5B, 1_777_088_000)],
)
def test_dense_param_counts_are_exact(config: dict[str, Any], exact: int) -> None:
    # The parameter counts of the safetensors checkpoints of these base models.
    counts = param_count(config)
    assert counts.total == exact
    assert counts.active == counts.total
    assert counts.experts == counts.shared_experts == counts.router == 0


def test_llama_8b_split_by_hand() -> None:
    counts = param_count(LLAMA_8B)
    assert counts.embedding == 2 * 128256 * 4096
    # q and o 4096×4096, k and v 4096×1024 (8 KV heads of 128), no biases.
    assert counts.attention == 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024)
    assert counts.dense_mlp == 32 * 3 * 4096 * 14336
    assert counts.norms == 4096 * (2 * 32 + 1)
    parts = counts.embedding + counts.attention + counts.dense_mlp + counts.norms
    assert counts.total == parts


def test_qwen2_has_qkv_biases_and_llama_does_not() -> None:
    as_llama = param_count({**QWEN_7B, "model_type": "llama"})
    qwen = param_count(QWEN_7B)
    head_dim = 3584 // 28
    assert qwen.attention - as_llama.attention == 28 * (28 + 2 * 4) * head_dim


def test_tie_word_embeddings_counts_the_matrix_once() -> None:
    untied = param_count(QWEN_1_5B)
    tied = param_count({**QWEN_1_5B, "tie_word_embeddings": True})
    assert untied.total - tied.total == 151936 * 1536
    assert tied.embedding == 151936 * 1536


def test_head_dim_from_config_overrides_the_default() -> None:
    default = param_count(LLAMA_8B)
    wide = param_count({**LLAMA_8B, "head_dim": 256})
    # q, k, v, o double their inner size (128 -> 256 per head).
    assert wide.attention == 2 * default.attention


def test_deepseek_v3_split() -> None:
    counts = param_count(DEEPSEEK_V3)
    moe_layers = 61 - 3
    per_expert = 3 * 7168 * 2048
    assert counts.experts == moe_layers * 256 * per_expert
    assert counts.shared_experts == moe_layers * per_expert
    assert counts.dense_mlp == 3 * 3 * 7168 * 18432
    assert counts.embedding == 2 * 129280 * 7168
    assert counts.router == moe_layers * (256 * 7168 + 256)
    assert counts.n_routed_experts == 256
    # DeepSeek-V3: 671B total, about 37B activated a token.
    assert counts.active == pytest.approx(37e9, rel=0.02)
    # The MTP layer is recorded, not counted.
    assert counts.mtp_layers == 1
    without_mtp = param_count({**DEEPSEEK_V3, "num_nextn_predict_layers": 0})
    assert without_mtp.total == counts.total


def test_mla_attention_by_hand_with_and_without_q_lora() -> None:
    hidden, heads, nope, rope, v, kv_lora = 64, 4, 16, 16, 16, 32
    kv = hidden * (kv_lora + rope) + kv_lora * heads * (nope + v) + heads * v * hidden
    with_lora = param_count(TINY_V3)
    assert with_lora.attention == 3 * (hidden * 32 + 32 * heads * (nope + rope) + kv)
    without = param_count({**TINY_V3, "q_lora_rank": None})
    assert without.attention == 3 * (hidden * heads * (nope + rope) + kv)
    # Latent down-projections and norms are held whole by every TP rank.
    assert without.replicated == (3 * hidden * (kv_lora + rope) + without.router
                                  + without.norms)


def test_moe_layer_freq_and_first_k_dense_replace() -> None:
    config = {**TINY_V3, "num_hidden_layers": 6, "first_k_dense_replace": 1, "moe_layer_freq": 2}
    counts = param_count(config)
    per_expert = 3 * 64 * 32
    # MoE layers: 2 and 4 (index ≥ 1 and even); dense: 0, 1, 3, 5.
    assert counts.experts == 2 * 8 * per_expert
    assert counts.dense_mlp == 4 * 3 * 64 * 128


def test_counts_agree_with_transformers() -> None:
    """Cross-check with the models transformers builds (on the meta device: no memory)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    for config in (TINY_V3, {**TINY_V3, "model_type": "deepseek_v2", "q_lora_rank": None,
                             "topk_method": "greedy"},
                   DEEPSEEK_V3, DEEPSEEK_V2_LITE, QWEN_1_5B, LLAMA_8B,
                   {**QWEN_7B, "tie_word_embeddings": True, "num_hidden_layers": 2},
                   {**LLAMA_8B, "num_hidden_layers": 2, "attention_bias": True,
                    "mlp_bias": True, "head_dim": 64}):
        kwargs = {k: v for k, v in config.items() if k != "model_type"}
        hf_config = transformers.AutoConfig.for_model(config["model_type"], **kwargs)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(hf_config)
        params = sum(p.numel() for p in model.parameters())
        # DeepSeek-V3's router bias is a buffer in transformers, a weight in the checkpoint.
        params += sum(b.numel() for name, b in model.named_buffers()
                      if name.endswith("e_score_correction_bias"))
        assert param_count(config).total == params, config["model_type"]


# --- KV cache -----------------------------------------------------------------------------------


def test_kv_bytes_per_token_mla_is_the_latent_on_every_rank() -> None:
    # (kv_lora_rank 512 + qk_rope_head_dim 64) × 61 layers × 2 bytes.
    assert kv_bytes_per_token(DEEPSEEK_V3, 2, 1) == 70272
    assert kv_bytes_per_token(DEEPSEEK_V3, 2, 8) == 70272
    assert kv_bytes_per_token(DEEPSEEK_V3, 1, 4) == 35136


def test_kv_bytes_per_token_gqa_splits_heads_over_tp() -> None:
    # 2 (K, V) × 8 heads × 128 × 64 layers × 2 bytes.
    assert kv_bytes_per_token(QWEN_32B, 2, 1) == 262144
    assert kv_bytes_per_token(QWEN_32B, 2, 2) == 131072
    assert kv_bytes_per_token(QWEN_32B, 2, 8) == 32768
    # TP 16 > 8 KV heads: a rank still holds one whole head.
    assert kv_bytes_per_token(QWEN_32B, 2, 16) == 32768
    # Llama-70B, TP 4: 2 heads a rank × 128 × 80 layers × 2 bytes.
    assert kv_bytes_per_token(LLAMA_70B, 2, 4) == 81920
    # Qwen-7B has 4 KV heads: ceil(4 / 8) = 1 at TP 8.
    assert kv_bytes_per_token(QWEN_7B, 2, 8) == 2 * 1 * 128 * 28 * 2


def test_kv_bytes_per_token_rejects_zero_tp() -> None:
    with pytest.raises(FitError, match="tensor_parallel"):
        kv_bytes_per_token(QWEN_7B, 2, 0)


# --- chips and bad input ------------------------------------------------------------------------


def test_chip_hbm() -> None:
    assert HBM_GIB == {"910B": 64, "910B4": 32, "910C": 64}
    assert chip_hbm_gib("910B4") == 32
    assert chip_hbm_gib("910c") == 64
    with pytest.raises(FitError, match=r"'910A'.*910B, 910B4, 910C"):
        chip_hbm_gib("910A")


def test_unknown_model_type_is_named() -> None:
    with pytest.raises(FitError, match=r"unsupported model_type 'mixtral'.*deepseek_v3"):
        param_count({**LLAMA_8B, "model_type": "mixtral"})
    with pytest.raises(FitError, match="model_type"):
        param_count({k: v for k, v in LLAMA_8B.items() if k != "model_type"})


@pytest.mark.parametrize("key", ["kv_lora_rank", "hidden_size", "moe_intermediate_size"])
def test_missing_key_is_named(key: str) -> None:
    config = {k: v for k, v in DEEPSEEK_V3.items() if k != key}
    with pytest.raises(FitError, match=f"lacks '{key}'"):
        estimate(config, **A3_NODE, weight_dtype="w8a8")


def test_fit_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="must be an integer"):
        param_count({**LLAMA_8B, "hidden_size": "4096"})


@pytest.mark.parametrize(
    ("override", "match"),
    [({"weight_dtype": "int4"}, r"weight_dtype 'int4'.*w8a8"),
     ({"kv_dtype": "fp8"}, r"kv_dtype 'fp8'"),
     ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
     ({"tensor_parallel": 0}, "tensor_parallel"),
     ({"max_model_len": 0}, "max_model_len"),
     ({"chip": "cpu"}, r"unknown chip 'cpu'.*hbm_gib")],
)
def test_bad_profile_raises(override: dict[str, Any], match: str) -> None:
    with pytest.raises(FitError, match=match):
        estimate(LLAMA_8B, **{"chip": "910B", "tensor_parallel": 1, "max_model_len": 4096,
                              "max_num_seqs": 8, **override})


# --- verdicts -----------------------------------------------------------------------------------


def assert_consistent(report: FitReport) -> None:
    """The report's numbers add up."""
    assert report.budget_gib == pytest.approx(report.hbm_gib * report.gpu_memory_utilization,
                                              abs=0.01)
    left = report.budget_gib - report.weights_gib_per_chip - report.overhead_gib
    assert report.free_for_kv_gib == pytest.approx(left, abs=0.02)
    sequence = report.kv_bytes_per_token * report.max_model_len / GIB
    assert report.kv_gib_per_sequence == round(sequence, 2)
    if report.fits:
        assert report.full_sequences >= 1
        assert report.full_sequences * sequence <= report.free_for_kv_gib + 0.01
        assert (report.full_sequences + 1) * sequence > report.free_for_kv_gib - 0.01
        assert report.suggestion is None
    else:
        assert report.suggestion is not None


def test_r1_w8a8_fits_one_a3_node() -> None:
    report = estimate(DEEPSEEK_R1, **A3_NODE, weight_dtype="w8a8")
    assert report.fits
    assert_consistent(report)
    assert report.params_total == param_count(DEEPSEEK_R1).total
    assert report.budget_gib == 58.88
    assert report.chips == 16
    # Routed experts over 16 EP ranks in int8: 58 layers × 16 experts × 3 × 7168 × 2048 bytes.
    experts_gib = 58 * 16 * 3 * 7168 * 2048 / GIB
    assert experts_gib < report.weights_gib_per_chip < experts_gib + 6
    # 576 latent values × 61 layers × 2 bytes × 16384 tokens.
    assert report.kv_gib_per_sequence == round(576 * 61 * 2 * 16384 / GIB, 2)
    if report.full_sequences < report.max_num_seqs:
        assert report.note is not None and "max_num_seqs 16" in report.note
    dumped = json.loads(json.dumps(report.model_dump()))
    assert dumped["fits"] is True
    assert dumped["weights_gib_per_chip"] == report.weights_gib_per_chip


def test_r1_bf16_does_not_fit_one_a3_node_and_says_why() -> None:
    report = estimate(DEEPSEEK_R1, **A3_NODE, weight_dtype="bf16", chips=16)
    assert not report.fits
    assert_consistent(report)
    assert report.full_sequences == 0
    assert report.weights_gib_per_chip + report.overhead_gib > report.budget_gib
    assert f"weights {report.weights_gib_per_chip:.2f} GiB per chip" in report.reason
    assert "3.00 GiB overhead exceed the 58.88 GiB budget (64 GiB × 0.92) of a 910C chip" in (
        report.reason)
    # No larger TP helps on 16 chips (experts stay over 16 EP ranks): W8A8 does.
    assert report.suggestion is not None
    assert report.suggestion.startswith("use W8A8 weights (--quantization ascend)")
    assert suggested_tp(report.suggestion) == 4
    w8a8 = estimate(DEEPSEEK_R1, **A3_NODE, weight_dtype="w8a8", chips=16)
    assert w8a8.fits
    assert f"{w8a8.weights_gib_per_chip:.2f} GiB of weights per chip" in report.suggestion


def test_r1_bf16_with_chips_unbounded_suggests_a_larger_tp() -> None:
    report = estimate(DEEPSEEK_R1, **A3_NODE, weight_dtype="bf16")
    tp = suggested_tp(report.suggestion)
    assert tp > 4
    assert "data parallel 4" in str(report.suggestion)
    wider = estimate(DEEPSEEK_R1, **{**A3_NODE, "tensor_parallel": tp}, weight_dtype="bf16")
    assert wider.fits


def test_r1_w8a8_fits_two_a2_nodes_but_not_one() -> None:
    two = estimate(DEEPSEEK_R1, **{**A3_NODE, "chip": "910B"}, weight_dtype="w8a8", chips=16)
    assert two.fits
    assert_consistent(two)
    one = estimate(DEEPSEEK_R1, chip="910B", tensor_parallel=8, expert_parallel=True,
                   weight_dtype="w8a8", max_model_len=16384, max_num_seqs=16,
                   gpu_memory_utilization=0.92, chips=8)
    assert not one.fits
    assert one.suggestion is not None
    assert one.suggestion.startswith("does not fit on 8 chips: needs about")


def test_expert_parallel_spreads_experts_over_all_ranks() -> None:
    with_ep = estimate(DEEPSEEK_R1, **A3_NODE, weight_dtype="w8a8")
    without = estimate(DEEPSEEK_R1, **{**A3_NODE, "expert_parallel": False}, weight_dtype="w8a8")
    experts = param_count(DEEPSEEK_R1).experts  # 1 byte each in W8A8
    expected = experts * (1 / 4 - 1 / 16) / GIB
    assert without.weights_gib_per_chip - with_ep.weights_gib_per_chip == pytest.approx(
        expected, abs=0.02)
    assert not without.fits


def test_qwen_32b_tp4_fits_tp1_does_not_and_the_suggestion_agrees() -> None:
    profile: dict[str, Any] = {"chip": "910B", "max_model_len": 32768, "max_num_seqs": 64,
                               "gpu_memory_utilization": 0.9}
    tp4 = estimate(QWEN_32B, tensor_parallel=4, **profile)
    assert tp4.fits
    assert_consistent(tp4)
    tp1 = estimate(QWEN_32B, tensor_parallel=1, **profile)
    assert not tp1.fits
    assert_consistent(tp1)
    tp = suggested_tp(tp1.suggestion)
    assert tp in (2, 4)
    # The suggestion is the smallest TP above 1 that estimate() accepts.
    assert estimate(QWEN_32B, tensor_parallel=tp, **profile).fits
    for smaller in range(2, tp):
        if 40 % smaller == 0:
            assert not estimate(QWEN_32B, tensor_parallel=smaller, **profile).fits
    assert suggest(QWEN_32B, tensor_parallel=tp, **profile) is None


def test_llama_70b_on_910b4_tp4_needs_more_chips_or_w8a8() -> None:
    profile: dict[str, Any] = {"chip": "910B4", "tensor_parallel": 4, "max_model_len": 32768,
                               "max_num_seqs": 64, "gpu_memory_utilization": 0.9}
    report = estimate(LLAMA_70B, **profile)
    assert not report.fits
    assert report.hbm_gib == 32
    assert "of a 910B4 chip" in report.reason
    tp = suggested_tp(report.suggestion)
    assert tp == 8
    assert estimate(LLAMA_70B, **{**profile, "tensor_parallel": tp}).fits
    # With only 4 chips, W8A8 at TP 4 is the way.
    bounded = estimate(LLAMA_70B, **profile, chips=4)
    assert bounded.suggestion is not None
    assert bounded.suggestion.startswith("use W8A8 weights")
    assert suggested_tp(bounded.suggestion) == 4
    assert estimate(LLAMA_70B, **profile, chips=4, weight_dtype="w8a8").fits


def test_short_kv_cache_suggests_a_shorter_max_model_len() -> None:
    profile: dict[str, Any] = {"chip": "910B4", "tensor_parallel": 1, "weight_dtype": "w8a8",
                               "max_num_seqs": 8, "gpu_memory_utilization": 0.9, "chips": 1}
    report = estimate(QWEN_7B, max_model_len=1_000_000, **profile)
    assert not report.fits
    assert report.free_for_kv_gib > 0
    assert report.reason.startswith("the KV cache of one 1000000-token sequence needs")
    assert report.suggestion is not None
    match = re.match(r"lower max_model_len to (\d+)", report.suggestion)
    assert match, report.suggestion
    tokens = int(match.group(1))
    assert tokens % 128 == 0
    assert estimate(QWEN_7B, max_model_len=tokens, **profile).fits
    assert not estimate(QWEN_7B, max_model_len=tokens + 128, **profile).fits


def test_layout_larger_than_the_chips_does_not_fit() -> None:
    report = estimate(LLAMA_8B, chip="910B", tensor_parallel=4, data_parallel=4,
                      max_model_len=8192, max_num_seqs=8, chips=8)
    assert not report.fits
    assert "needs 16 chips but 8 are available" in report.reason
    assert report.suggestion is not None


def test_tp_must_divide_attention_heads() -> None:
    report = estimate(QWEN_32B, chip="910B", tensor_parallel=16, max_model_len=8192,
                      max_num_seqs=8)
    assert not report.fits
    assert "num_attention_heads 40 is not divisible by tensor parallel 16" in report.reason


def test_dense_weights_split_over_tp_with_replicated_norms_and_kv_heads() -> None:
    counts = param_count(LLAMA_70B)
    tp1 = weights_bytes_per_chip(LLAMA_70B, tensor_parallel=1)
    assert tp1 == 2 * counts.total
    tp8 = weights_bytes_per_chip(LLAMA_70B, tensor_parallel=8)
    assert tp8 == pytest.approx(2 * ((counts.total - counts.norms) / 8 + counts.norms))
    # At TP 16 each rank still holds one of the 8 KV heads: k/v weights are 1/8, not 1/16.
    kv_proj = 80 * 2 * 8192 * 1024
    tp16 = weights_bytes_per_chip(LLAMA_70B, tensor_parallel=16)
    expected = 2 * ((counts.total - counts.norms - kv_proj) / 16 + counts.norms + kv_proj / 8)
    assert tp16 == pytest.approx(expected)


def test_w8a8_keeps_embeddings_in_bf16() -> None:
    counts = param_count(LLAMA_8B)
    w8a8 = weights_bytes_per_chip(LLAMA_8B, tensor_parallel=1, weight_dtype="w8a8")
    assert w8a8 == counts.total + counts.embedding + counts.norms
    fp32 = weights_bytes_per_chip(LLAMA_8B, tensor_parallel=1, weight_dtype="fp32")
    assert fp32 == 4 * counts.total


def test_tiny_deepseek_v3_fits_on_cpu() -> None:
    report = estimate(TINY_V3, chip="cpu", hbm_gib=2, tensor_parallel=1, max_model_len=4096,
                      max_num_seqs=4, gpu_memory_utilization=0.9, overhead_gib=0.5)
    assert report.fits
    assert_consistent(report)
    assert report.hbm_gib == 2
    assert report.chip == "cpu"
    # (kv_lora_rank 32 + qk_rope_head_dim 16) × 3 layers × 2 bytes.
    assert report.kv_bytes_per_token == 288
    assert report.full_sequences >= 4
    assert report.note is None
    too_small = estimate(TINY_V3, chip="cpu", hbm_gib=0.5, tensor_parallel=1,
                         max_model_len=4096, max_num_seqs=4, overhead_gib=0.5)
    assert not too_small.fits
    assert "of the cpu host" in too_small.reason


def test_as_text_summarises_the_verdict() -> None:
    ok = estimate(DEEPSEEK_R1, **A3_NODE, weight_dtype="w8a8").as_text()
    assert ok.splitlines()[0] == "deepseek_v3 on 910C: fits"
    assert "tensor parallel 4 × data parallel 4, expert parallel" in ok
    assert "58.88 GiB (64 GiB × 0.92)" in ok
    report = estimate(DEEPSEEK_R1, **A3_NODE, weight_dtype="bf16", chips=16)
    text = report.as_text()
    assert "does NOT fit" in text.splitlines()[0]
    assert report.reason in text
    assert str(report.suggestion) in text
    assert len(text.splitlines()) >= 6


def test_suggest_is_none_for_a_fitting_profile() -> None:
    assert suggest(DEEPSEEK_R1, **A3_NODE, weight_dtype="w8a8") is None


def test_full_sequences_counts_whole_sequences() -> None:
    report = estimate(QWEN_32B, chip="910B", tensor_parallel=2, max_model_len=32768,
                      max_num_seqs=4, gpu_memory_utilization=0.9)
    # 128 KiB a token at TP 2: 4 GiB a 32768-token sequence.
    assert report.kv_gib_per_sequence == 4.0
    assert report.full_sequences == math.floor(report.free_for_kv_gib / 4.0)
    assert report.note is None


def test_v32_adds_the_lightning_indexer_to_v3() -> None:
    """DeepSeek-V3.2: V3 plus a lightning indexer per layer; its keys are cached per token."""
    from ascend_serve.serving.profiles import resolve

    v3 = dict(resolve("deepseek-r1-w8a8-a3").model.config or {})
    v32 = dict(resolve("deepseek-v3.2-w8a8-a3").model.config or {})
    assert v32["model_type"] == "deepseek_v32"
    base, sparse = param_count(v3), param_count(v32)
    # Per layer: wq_b 1536 x 64 x 128, wk 7168 x 128, weights_proj 7168 x 64, k_norm 2 x 128.
    per_layer = 1536 * 64 * 128 + 7168 * 128 + 7168 * 64 + 2 * 128
    assert sparse.total - base.total == 61 * per_layer
    # Both are "685B" on the model card with the 14B MTP layer; without it, about 671-672B.
    assert 671e9 < sparse.total < 673e9
    assert kv_bytes_per_token(v32) == (512 + 64 + 128) * 61 * 2
    assert kv_bytes_per_token(v32) - kv_bytes_per_token(v3) == 128 * 61 * 2


def test_v4_is_refused_as_not_estimable_not_as_unknown() -> None:
    from ascend_serve.serving.fit import NotEstimableError

    with pytest.raises(NotEstimableError, match="compressed attention"):
        param_count({"model_type": "deepseek_v4", "hidden_size": 4096})
    with pytest.raises(FitError, match="unsupported model_type 'mamba'") as info:
        param_count({"model_type": "mamba"})
    assert not isinstance(info.value, NotEstimableError)
