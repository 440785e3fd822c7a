"""Beam: gated qk-normed attention, sliding RoPE layers and NoPE full layers, sandwich
norms with depth-scaled residuals, DeepSeek-V3 routing, soft-capped logits.

Three layers (sliding, sliding, full) with a window of 4, under the 15-token test
sequence; layer 0 dense, then 8 experts in 4 groups, 2 groups kept, top-3; a
soft-cap of 0.5 that the tiny model's logits exceed.
"""

BEAM = dict(
    num_hidden_layers=3,
    head_dim=16,
    sliding_window=4,
    num_experts=8,
    num_experts_per_tok=3,
    moe_intermediate_size=32,
    n_group=4,
    topk_group=2,
    mlp_layer_types=["dense", "sparse", "sparse"],
    final_logit_softcapping=0.5,
)

CASES = {
    "beam": ("beam", BEAM),
    "beam-bias-no-norm-tied": (
        "beam",
        dict(
            BEAM,
            attention_bias=True,
            norm_topk_prob=False,
            routed_scaling_factor=1.5,
            tie_word_embeddings=True,
            final_logit_softcapping=None,
            mlp_layer_types=["sparse", "dense", "sparse"],
        ),
    ),
}
