"""Qwen4-Exp text: Qwen3.5-MoE layers on gated residual streams, QSA attention, n-gram PLE.

The QSA indexer keeps 2 blocks of 2 tokens (plus the incomplete block) of up to 15, so the
sparse mask bites from the sixth token on; 8 indexer heads keep ``relu`` score ties unlikely.
PLE hashes into tiny prime tables (from 100) saved in 2 shards; ``eos_token_id`` 2 also
occurs in the random prompts, where it cuts the n-grams.
"""

from text_parity_cases import TINY

QWEN4_EXP = dict(
    num_hidden_layers=3,
    layer_types=["linear_attention", "full_attention", "linear_attention"],
    head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=8,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=48,
    hc_count=2,
    hc_lowrank=16,
    ple_layer_ids=[1],
    ple_embed_dim=32,
    heads_per_ngram=2,
    ngram_vocab_size_base=100,
    split_ngram_parts=2,
    indexer_n_heads=8,
    indexer_kv_heads=1,
    indexer_head_dim=16,
    indexer_budget=4,
    indexer_compress_ratio=2,
    eos_token_id=2,
)

CASES = {
    "qwen4_exp_text": ("qwen4_exp_text", QWEN4_EXP),
    # sigmoid output gate, partial RoPE inside a wider index head, 3 streams, 4-grams on two
    # PLE layers (the second reads the next primes), plain top-k weights, budget 6 of ratio 3
    "qwen4_exp_text-variants": (
        "qwen4_exp_text",
        dict(
            QWEN4_EXP,
            num_hidden_layers=4,
            layer_types=[
                "linear_attention",
                "full_attention",
                "linear_attention",
                "full_attention",
            ],
            hc_count=3,
            ple_layer_ids=[3, 1],
            ngram_size=4,
            ple_embed_dim=48,
            ple_conv_kernel_size=3,
            output_gate_type="sigmoid",
            norm_topk_prob=False,
            indexer_head_dim=24,
            indexer_budget=6,
            indexer_compress_ratio=3,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.5,
            },
        ),
    ),
}

# The vision–language save (Qwen4ExpForConditionalGeneration, tower included), built with
# --model-type Qwen4ExpForCausalLM and checked against transformers' Qwen4ExpForCausalLM.
VISION = dict(
    depth=1,
    hidden_size=16,
    intermediate_size=32,
    num_heads=2,
    patch_size=4,
    spatial_merge_size=2,
    temporal_patch_size=2,
    num_position_embeddings=9,
    out_hidden_size=64,
)
CASES["qwen4_exp-text-only"] = (
    "qwen4_exp",
    dict(text_config=dict(TINY, **QWEN4_EXP), vision_config=VISION),
    {"model_class": "Qwen4ExpForCausalLM", "source_class": "Qwen4ExpForConditionalGeneration"},
)
