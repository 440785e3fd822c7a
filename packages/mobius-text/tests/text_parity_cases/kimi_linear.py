"""Kimi Linear: a KDA layer (per-channel decay) then a NoPE MLA layer; a dense then an MoE MLP."""

KIMI = dict(
    num_hidden_layers=2,
    layer_types=["linear_attention", "full_attention"],
    mlp_layer_types=["dense", "sparse"],
    num_key_value_heads=4,
    linear_num_heads=2,
    linear_head_dim=16,
    linear_conv_kernel_dim=4,
    kv_lora_rank=16,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=16,
    num_experts=4,
    num_experts_per_token=2,
    num_shared_experts=1,
    moe_intermediate_size=32,
    routed_scaling_factor=2.5,
    bos_token_id=1,  # the defaults are outside the tiny vocabulary
    eos_token_id=1,
)

CASES = {
    "kimi_linear": ("kimi_linear", KIMI),
    # Query LoRA, unnormalised top-k weights, two expert groups (one kept).
    "kimi_linear-q-lora-grouped-unnormalised": (
        "kimi_linear",
        dict(KIMI, q_lora_rank=24, moe_renormalize=False, num_expert_group=2, topk_group=1),
    ),
}
