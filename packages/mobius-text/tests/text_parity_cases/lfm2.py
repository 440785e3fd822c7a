"""LFM2: conv and attention layers interleaved, a 3-tap short convolution, a non-default FF width."""

HYBRID = dict(
    num_hidden_layers=4,
    layer_types=["conv", "full_attention", "conv", "full_attention"],
    conv_L_cache=3,
    block_multiple_of=16,
    block_ffn_dim_multiplier=1.0,  # FF width: int(2 * 128 / 3) = 85, rounded up to 16: 96
    norm_eps=1e-5,
)

CASES = {
    "lfm2": ("lfm2", HYBRID),
    # conv_bias: padded positions still feed in_proj's bias through the convolution, as in HF.
    "lfm2-conv-bias-untied-long-kernel": (
        "lfm2",
        dict(HYBRID, conv_bias=True, conv_L_cache=5, tie_word_embeddings=False),
    ),
}
