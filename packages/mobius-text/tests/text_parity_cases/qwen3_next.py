"""Qwen3-Next: Gated DeltaNet + gated attention (partial RoPE), routed experts + shared expert.

Fewer key heads than value heads exercises the per-key-head fused ``in_proj_qkvz`` layout.
"""

QWEN3_NEXT = dict(
    num_hidden_layers=3,
    layer_types=["linear_attention", "full_attention", "linear_attention"],
    head_dim=32,  # partial_rotary_factor 0.25 (the config default): 8 rotated channels
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=16,
    linear_conv_kernel_dim=4,
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=48,
    shared_expert_intermediate_size=96,
)

CASES = {
    "qwen3_next": ("qwen3_next", QWEN3_NEXT),
    "qwen3_next-dense-layer-bias-tied-mha": (
        "qwen3_next",
        dict(
            QWEN3_NEXT,
            layer_types=["full_attention", "linear_attention"],
            num_hidden_layers=2,
            mlp_only_layers=[1],
            norm_topk_prob=False,
            attention_bias=True,
            tie_word_embeddings=True,
            num_key_value_heads=4,
            linear_num_key_heads=4,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.5,
            },
        ),
    ),
}
