"""Qwen3.5 text (dense) and Qwen3.5-MoE text: Qwen3-Next with unfused DeltaNet projections."""

LINEAR = dict(
    num_hidden_layers=3,
    layer_types=["linear_attention", "full_attention", "linear_attention"],
    head_dim=32,  # partial_rotary_factor 0.25 (the config default): 8 rotated channels
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=16,
    linear_conv_kernel_dim=4,
)

CASES = {
    "qwen3_5_text": ("qwen3_5_text", LINEAR),
    "qwen3_5_text-bias-tied": (
        "qwen3_5_text",
        dict(LINEAR, attention_bias=True, tie_word_embeddings=True, linear_num_key_heads=4),
    ),
    "qwen3_5_moe_text": (
        "qwen3_5_moe_text",
        dict(
            LINEAR,
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=48,
            shared_expert_intermediate_size=96,
        ),
    ),
}
