"""Bloom: ALiBi (power-of-two and odd head counts), tied and untied heads, post-norm residuals."""

BLOOM = dict(n_head=4)

CASES = {
    "bloom": ("bloom", BLOOM),
    "bloom-untied": ("bloom", dict(BLOOM, tie_word_embeddings=False)),
    # 6 heads: the slopes of the two extra heads interleave from the 8-head sequence.
    "bloom-6-heads-residual-post-ln": (
        "bloom",
        dict(n_head=6, hidden_size=48, apply_residual_connection_post_layernorm=True),
    ),
}
