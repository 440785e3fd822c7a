"""ERNIE 4.5: interleaved RoPE; use_bias on and off; tied (its default) and untied."""

CASES = {
    "ernie4_5": ("ernie4_5", dict(head_dim=16)),
    "ernie4_5-bias-untied": (
        "ernie4_5",
        dict(head_dim=24, use_bias=True, tie_word_embeddings=False),
    ),
}
