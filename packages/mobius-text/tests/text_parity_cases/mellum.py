"""Mellum: 8 experts top-2, a dense layer, and sliding/full layers with different RoPE thetas."""

ROPE = {
    "full_attention": {"rope_type": "default", "rope_theta": 500000.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
}
BASE = dict(
    num_experts=8,
    num_experts_per_tok=2,
    moe_intermediate_size=48,
    head_dim=16,
    sliding_window=4,
    rope_parameters=ROPE,
    eos_token_id=2,
)

CASES = {
    "mellum": (
        "mellum",
        dict(
            **BASE,
            num_hidden_layers=3,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            mlp_layer_types=["dense", "sparse", "sparse"],
        ),
    ),
    "mellum-unnormalised-bias": (
        "mellum",
        dict(
            **BASE,
            layer_types=["full_attention", "sliding_attention"],
            norm_topk_prob=False,
            attention_bias=True,
        ),
    ),
}
