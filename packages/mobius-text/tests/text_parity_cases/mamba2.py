"""Mamba-2: chunk_size 4 so that the 7-token prompt spans two SSD chunks in PyTorch."""

SSM2 = dict(
    state_size=8,
    conv_kernel=4,
    expand=2,
    num_heads=8,
    head_dim=16,
    n_groups=2,
    chunk_size=4,
    layer_norm_epsilon=1e-5,
)
OPTIONS = {"decode_attention_mask": False}

CASES = {
    "mamba2": ("mamba2", SSM2, OPTIONS),
    "mamba2-one-group-tied-bias": (
        "mamba2",
        dict(SSM2, n_groups=1, tie_word_embeddings=True, use_bias=True),
        OPTIONS,
    ),
}
