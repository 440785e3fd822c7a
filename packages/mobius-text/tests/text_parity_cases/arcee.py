"""Arcee: Llama with a non-gated relu² MLP."""

CASES = {
    "arcee": ("arcee", {}),
    "arcee-bias-tied": (
        "arcee",
        dict(attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
    ),
}
