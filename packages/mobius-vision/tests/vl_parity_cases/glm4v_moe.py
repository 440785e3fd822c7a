"""GLM-4.5V: GLM-4.1V's tower and processor over a GLM-4-MoE decoder (rotate-half partial
M-RoPE, DeepSeek-V3 routing over 8 experts in 4 groups, a dense first layer)."""

from vl_parity_cases.glm4v import OPTIONS, TEXT, VISION, glm4v_config, glm4v_processor

MOE_TEXT = dict(
    TEXT,
    model_type="glm4v_moe_text",
    n_routed_experts=8,
    n_shared_experts=2,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    first_k_dense_replace=1,
    n_group=4,
    topk_group=2,
)

CASES = {
    "glm4v_moe-two-sizes": (
        "glm4v_moe",
        glm4v_config(VISION, MOE_TEXT, model_type="glm4v_moe"),
        glm4v_processor,
        OPTIONS,
    ),
    # every layer routed, unnormalised top-k scaled, full rotary, a tied head
    "glm4v_moe-all-sparse-tied": (
        "glm4v_moe",
        glm4v_config(
            VISION,
            dict(
                MOE_TEXT,
                first_k_dense_replace=0,
                norm_topk_prob=False,
                routed_scaling_factor=2.0,
                rope_parameters={
                    "rope_type": "default",
                    "rope_theta": 10000.0,
                    "partial_rotary_factor": 1.0,
                    "mrope_section": [2, 3, 3],
                },
            ),
            model_type="glm4v_moe",
            tie_word_embeddings=True,
        ),
        glm4v_processor,
        OPTIONS,
    ),
}
