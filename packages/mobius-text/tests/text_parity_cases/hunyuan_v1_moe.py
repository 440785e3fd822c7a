"""Hunyuan V1 MoE: post-RoPE q/k norms, 4 experts (top 2, renormalised) plus a shared MLP."""

CASES = {
    "hunyuan_v1_moe": ("hunyuan_v1_moe", dict(head_dim=16, num_experts=4, moe_topk=2)),
    "hunyuan_v1_moe-ntk-alpha-bias": (
        "hunyuan_v1_moe",
        dict(
            head_dim=24,
            num_experts=4,
            moe_topk=3,
            attention_bias=True,
            rope_parameters={
                "rope_type": "dynamic",
                "rope_theta": 10000.0,
                "alpha": 50.0,
                "factor": 1.0,
            },
        ),
    ),
}
