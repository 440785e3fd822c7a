"""EXAONE-MoE: q/k-normed attention, sliding layers with RoPE and a NoPE global layer, V3 routing."""

MOE = dict(
    num_experts=8,
    num_shared_experts=2,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    first_k_dense_replace=1,
)

CASES = {
    # pattern 2: layer 0 slides (window 4 < the 15-token test), layer 1 is global and NoPE.
    "exaone_moe": (
        "exaone_moe",
        dict(**MOE, n_group=4, topk_group=2, sliding_window=4, sliding_window_pattern=2),
    ),
    "exaone_moe-all-sparse": (
        "exaone_moe",
        dict(
            **MOE | {"first_k_dense_replace": 0},
            norm_topk_prob=False,
            sliding_window=4,
            sliding_window_pattern=2,
            tie_word_embeddings=True,
        ),
    ),
}
