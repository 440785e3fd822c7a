"""Laguna: per-layer head counts, softplus output gates, RoPE per layer type (full
layers rotate half of each head, at another theta), sigmoid routing with a
correction bias and shared expert.

Three layers (sliding, full, sliding) with a window of 4 under the 15-token test
sequence and 8, 4, 2 query heads; 8 experts, top-3, layer 0 dense.
"""

LAGUNA = dict(
    num_hidden_layers=3,
    head_dim=16,
    sliding_window=4,
    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    num_attention_heads_per_layer=[8, 4, 2],
    num_experts=8,
    num_experts_per_tok=3,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=48,
    moe_routed_scaling_factor=2.5,
)

CASES = {
    "laguna": ("laguna", LAGUNA),
    "laguna-per-element-softcap": (
        "laguna",
        dict(
            LAGUNA,
            gating="per-element",
            moe_router_logit_softcapping=0.5,
            attention_bias=True,
            tie_word_embeddings=True,
            mlp_layer_types=["sparse", "dense", "sparse"],
        ),
    ),
}
