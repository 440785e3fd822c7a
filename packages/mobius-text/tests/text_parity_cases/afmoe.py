"""AFMoE: gated qk-normed attention, NoPE global layers, sandwich norms, dense first
layer then shared + sigmoid-routed experts with a selection bias, muP embedding scale.

The sliding window (4) is shorter than the 15-token test sequence; ``expert_bias`` is
perturbed like every parameter, so it changes which experts are selected.
"""

AFMOE = dict(
    num_hidden_layers=3,
    head_dim=16,
    moe_intermediate_size=32,
    num_experts=4,
    num_experts_per_tok=2,
    num_shared_experts=2,
    num_dense_layers=1,
    sliding_window=4,
    global_attn_every_n_layers=2,  # sliding, full, sliding
    route_scale=2.5,
)

CASES = {
    "afmoe": ("afmoe", AFMOE),
    "afmoe-mup-tied-bias": (
        "afmoe",
        dict(
            AFMOE,
            mup_enabled=True,
            tie_word_embeddings=True,
            attention_bias=True,
            num_key_value_heads=1,
            num_experts_per_tok=1,
            num_shared_experts=1,
        ),
    ),
}
