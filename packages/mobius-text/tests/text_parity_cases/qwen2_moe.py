"""Qwen2-MoE and Qwen3-MoE: 8 experts, top-2, with and without renormalised top-k weights.

``mlp_only_layers`` keeps one layer dense so both MLP kinds are checked; a sliding
window below the prompt length covers Qwen2-MoE's alternating window layers.
"""

MOE = dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=48)

CASES = {
    "qwen2_moe": ("qwen2_moe", dict(**MOE, shared_expert_intermediate_size=96)),
    "qwen2_moe-norm-dense-layer": (
        "qwen2_moe",
        dict(**MOE, shared_expert_intermediate_size=96, norm_topk_prob=True, mlp_only_layers=[0]),
    ),
    "qwen2_moe-sliding-tied-nobias": (
        "qwen2_moe",
        dict(
            **MOE,
            shared_expert_intermediate_size=96,
            use_sliding_window=True,
            sliding_window=4,
            qkv_bias=False,
            tie_word_embeddings=True,
        ),
    ),
    "qwen3_moe": ("qwen3_moe", dict(**MOE, norm_topk_prob=True)),
    "qwen3_moe-sparse-step-bias": (
        "qwen3_moe",
        dict(**MOE, decoder_sparse_step=2, attention_bias=True, head_dim=24),
    ),
    "qwen3_moe-sliding": (
        "qwen3_moe",
        dict(**MOE, use_sliding_window=True, sliding_window=4),
    ),
}
