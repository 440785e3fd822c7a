"""Bailing hybrid: KDA (bounded or softplus forget gate) then a gated RoPE MLA layer; MoE."""

BAILING = dict(
    num_hidden_layers=2,
    layer_types=["linear_attention", "full_attention"],
    mlp_layer_types=["dense", "sparse"],
    head_dim=16,  # the KDA head width; 4 heads
    num_key_value_heads=4,
    short_conv_kernel_size=4,
    kv_lora_rank=16,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=16,
    num_experts=4,
    num_experts_per_token=2,
    num_shared_experts=1,
    num_expert_group=2,
    topk_group=1,
    moe_intermediate_size=32,
    num_nextn_predict_layers=0,
    eos_token_id=1,  # the default is outside the tiny vocabulary
)

CASES = {
    "bailing_hybrid": ("bailing_hybrid", BAILING),
    "bailing_hybrid-softplus-gate-q-lora-unnormalised": (
        "bailing_hybrid",
        dict(BAILING, kda_safe_gate=False, q_lora_rank=24, moe_renormalize=False),
    ),
}
