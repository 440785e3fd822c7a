"""OLMo 2: post-norms and q/k RMSNorms over the full projection."""

CASES = {
    "olmo2": ("olmo2", {}),
    "olmo2-bias-tied-mha": (
        "olmo2",
        dict(attention_bias=True, tie_word_embeddings=True, num_key_value_heads=4),
    ),
}
