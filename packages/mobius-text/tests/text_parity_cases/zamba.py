"""Zamba: two hybrid layers sharing one attention block, a multi-head Mamba-1 mixer."""

HYBRID = dict(
    num_hidden_layers=4,
    layers_block_type=["mamba", "hybrid", "mamba", "hybrid"],
    n_mamba_heads=4,
    mamba_d_state=8,
    mamba_d_conv=4,
    mamba_expand=2,
    mamba_dt_rank=6,
)

CASES = {
    "zamba": ("zamba", HYBRID),
    # Untied embeddings: transformers keeps a separate block per hybrid layer.
    "zamba-untied-biases-gqa": (
        "zamba",
        dict(
            HYBRID,
            tie_word_embeddings=False,
            mamba_proj_bias=True,
            num_key_value_heads=2,
            hidden_act="gelu_pytorch_tanh",
        ),
    ),
}
