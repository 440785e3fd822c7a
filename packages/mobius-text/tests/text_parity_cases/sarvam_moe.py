"""Sarvam-MoE: GLM-4-MoE (q/k norm, full-head RoPE, q/k/v biases) under its original names."""

CASES = {
    "sarvam_moe": (
        "sarvam_moe",
        dict(
            head_dim=16,
            n_routed_experts=8,
            n_shared_experts=2,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            first_k_dense_replace=1,
            n_group=4,
            topk_group=2,
            use_qkv_bias=True,
        ),
    ),
}
