"""DeepSeek-V2 and V3: multi-head latent attention and routed + shared experts.

The tiny MLA uses distinct nope/rope/value head sizes so a mixed-up split fails;
8 experts in 4 groups with top-2 routing over 2 groups make group-limited routing
bite (V2 needs top_k > topk_group for that); layer 0 is dense (``first_k_dense_replace``). YaRN cases carry ``mscale`` and
``mscale_all_dim`` so the softmax-scale adjustment matters. MLA expands the latent
into per-head keys, so ``num_key_value_heads`` equals the head count.
"""

MLA = dict(
    num_key_value_heads=4,
    q_lora_rank=24,
    kv_lora_rank=16,
    qk_nope_head_dim=12,
    qk_rope_head_dim=8,
    v_head_dim=10,
)
MOE = dict(
    n_routed_experts=8,
    n_shared_experts=2,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    first_k_dense_replace=1,
)
YARN = dict(
    rope_parameters={
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 16,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 0.707,
        "mscale_all_dim": 1.0,
    },
)


def tiny(**overrides):
    """The tiny MLA + MoE config with ``overrides`` on top."""
    return {**MLA, **MOE, **overrides}


CASES = {
    "deepseek_v2": ("deepseek_v2", tiny(routed_scaling_factor=1.5)),
    "deepseek_v2-no-q-lora": ("deepseek_v2", tiny(q_lora_rank=None)),
    "deepseek_v2-group-limited": (
        "deepseek_v2",
        tiny(
            topk_method="group_limited_greedy",
            n_group=4,
            topk_group=2,
            # Ranked by their best expert, the top groups always hold the top 2 experts:
            # a third pick is what can fall in a masked group.
            num_experts_per_tok=3,
            attention_bias=True,
            mlp_bias=True,  # V2's dense and shared MLPs honour it (V3's do not have it)
        ),
    ),
    "deepseek_v2-yarn": ("deepseek_v2", tiny(**YARN)),
    "deepseek_v3": ("deepseek_v3", tiny(n_group=4, topk_group=2, routed_scaling_factor=2.5)),
    "deepseek_v3-no-norm-half-rope": (
        "deepseek_v3",
        tiny(
            n_group=2, topk_group=1, norm_topk_prob=False, rope_interleave=False, q_lora_rank=None
        ),
    ),
    "deepseek_v3-yarn": ("deepseek_v3", tiny(n_group=4, topk_group=2, **YARN)),
}

# Families transformers builds from DeepSeek-V3's attention.
CASES |= {
    "glm4_moe_lite": (
        "glm4_moe_lite",
        tiny(n_group=4, topk_group=2, mlp_layer_types=["dense", "sparse"]),
    ),
    "glm4_moe_lite-all-sparse-yarn": (
        "glm4_moe_lite",
        tiny(mlp_layer_types=["sparse", "sparse"], routed_scaling_factor=1.8, **YARN),
    ),
    "sarvam_mla": ("sarvam_mla", tiny(n_group=2, topk_group=1, q_lora_rank=None)),
    "youtu": ("youtu", MLA),
    "youtu-untied-half-rope": (
        "youtu",
        {**MLA, "tie_word_embeddings": False, "rope_interleave": False},
    ),
}
