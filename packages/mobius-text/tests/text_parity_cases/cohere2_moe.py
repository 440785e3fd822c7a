"""Cohere2-MoE: a dense RoPE prefix layer, then sliding (RoPE) and full (NoPE) MoE layers.

8 experts, top-2; the variants cover sigmoid routing with renormalisation, summed vs
averaged shared experts, RMSNorm vs LayerNorm, and a sliding window under the prompt.
"""

BASE = dict(
    num_experts=8,
    num_experts_per_tok=2,
    head_dim=16,
    sliding_window=4,
    logit_scale=0.5,
    eos_token_id=2,
)

CASES = {
    "cohere2_moe": (
        "cohere2_moe",
        dict(
            **BASE,
            num_hidden_layers=5,
            first_k_dense_replace=1,
            prefix_dense_intermediate_size=96,
            num_shared_experts=1,
        ),
    ),
    "cohere2_moe-sigmoid-sum-rms": (
        "cohere2_moe",
        dict(
            **BASE,
            num_hidden_layers=4,
            expert_selection_fn="sigmoid",
            norm_topk_prob=True,
            num_shared_experts=2,
            shared_expert_combination_strategy="sum",
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
        ),
    ),
    "cohere2_moe-sigmoid-raw": (
        "cohere2_moe",
        dict(**BASE, expert_selection_fn="sigmoid", norm_topk_prob=False, attention_bias=True),
    ),
}
