"""GLM-4-MoE and Solar Open (GLM-4-MoE attention, every layer MoE).

GQA attention with partial RoPE (GLM's default 0.5), q/k/v biases on, optional
q/k norm, and DeepSeek-V3 routing over 8 experts in 4 groups (2 chosen).
"""

MOE = dict(
    n_routed_experts=8,
    n_shared_experts=2,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    first_k_dense_replace=1,
)

CASES = {
    "glm4_moe": (
        "glm4_moe",
        dict(**MOE, n_group=4, topk_group=2, attention_bias=True, use_qk_norm=True),
    ),
    "glm4_moe-no-qk-norm": (
        "glm4_moe",
        dict(**MOE, norm_topk_prob=False, routed_scaling_factor=2.0, tie_word_embeddings=True),
    ),
    "solar_open": ("solar_open", dict(**MOE, n_group=4, topk_group=2, attention_bias=True)),
}
