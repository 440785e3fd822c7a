"""MPT: ALiBi with MPT's slope schedule (power-of-two and odd head counts), clip_qkv that bites."""

MPT = dict(d_model=64, n_heads=4, n_layers=2, expansion_ratio=4)

CASES = {
    "mpt": ("mpt", MPT),
    # The perturbed fused projection reaches about ±1.5: a 0.5 clamp cuts most of it.
    "mpt-clip-qkv-untied": (
        "mpt",
        dict(MPT, attn_config=dict(clip_qkv=0.5), tie_word_embeddings=False),
    ),
    # 6 heads: slopes of the 8-head schedule, odd indices first.
    "mpt-6-heads-softmax-scale": (
        "mpt",
        dict(MPT, d_model=48, n_heads=6, attn_config=dict(softmax_scale=0.3)),
    ),
}
