"""OLMo Hybrid: Gated DeltaNet and post-norm attention layers; fewer key heads than value heads."""

HYBRID = dict(
    num_hidden_layers=3,
    layer_types=["linear_attention", "full_attention", "linear_attention"],
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=16,
    linear_conv_kernel_dim=4,
)

CASES = {
    "olmo_hybrid": ("olmo_hybrid", HYBRID),
    # No rope_theta: the attention layers use no positional encoding (NoPE).
    "olmo_hybrid-nope-no-neg-eigval-tied-mha": (
        "olmo_hybrid",
        dict(
            HYBRID,
            layer_types=["full_attention", "linear_attention"],
            num_hidden_layers=2,
            linear_allow_neg_eigval=False,
            linear_num_key_heads=4,
            tie_word_embeddings=True,
            num_key_value_heads=4,
            rope_parameters={"rope_type": "default", "rope_theta": None},
        ),
    ),
}
