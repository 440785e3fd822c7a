"""Lara Mini: DeltaNet, sliding (window 3 < the test sequence) and NoPE full layers, MoE MLPs."""

LARA = dict(
    num_hidden_layers=3,
    layer_types=["linear_attention", "sliding_attention", "full_attention"],
    head_dim=16,
    sliding_window=3,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=16,
    linear_conv_kernel_dim=4,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=48,
    eos_token_id=1,  # the default (151643) is outside the tiny vocabulary
)

CASES = {
    "lara_mini": ("lara_mini", LARA),
    "lara_mini-unnormalised-untied-bias": (
        "lara_mini",
        dict(LARA, norm_topk_prob=False, tie_word_embeddings=False, attention_bias=True),
    ),
}
