"""dots.llm1: Qwen3 attention with DeepSeek-V3 MoE; layer 1 slides over a 4-token window."""

MOE = dict(
    n_routed_experts=8,
    n_shared_experts=2,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    first_k_dense_replace=1,
)

CASES = {
    "dots1": (
        "dots1",
        dict(**MOE, n_group=4, topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.0),
    ),
    "dots1-sliding-bias": (
        "dots1",
        dict(**MOE, sliding_window=4, max_window_layers=1, attention_bias=True),
    ),
}
