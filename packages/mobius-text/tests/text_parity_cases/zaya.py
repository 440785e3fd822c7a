"""ZAYA: three layers (sliding, full, sliding; window 4 under the 15-token test
sequence), 4 experts plus the skip class, a router state carried across layers, and
the CCA convolution / delayed-value states carried across decode steps. (The skip class
starts with a balancing bias of -1, so a tiny random model never picks it.)"""

ZAYA = dict(
    num_hidden_layers=3,
    head_dim=16,
    num_experts=4,
    moe_intermediate_size=32,
    router_hidden_size=24,
    sliding_window=4,
    layer_types=["hybrid_sliding", "hybrid", "hybrid_sliding"],
)

CASES = {
    "zaya": ("zaya", ZAYA),
    "zaya-bias-untied-kernel3": (
        "zaya",
        dict(
            ZAYA,
            attention_bias=True,
            tie_word_embeddings=False,
            lm_head_bias=True,
            cca_time0=3,
            num_key_value_heads=1,
        ),
    ),
}
