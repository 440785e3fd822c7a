"""StarCoder2: biases on and off, LayerNorms, GELU MLP, a sliding window shorter than the test sequence."""

TOKENS = dict(bos_token_id=1, eos_token_id=2)

CASES = {
    "starcoder2": ("starcoder2", dict(TOKENS, sliding_window=4)),
    "starcoder2-no-bias-untied-full": (
        "starcoder2",
        dict(TOKENS, use_bias=False, tie_word_embeddings=False, num_key_value_heads=1),
    ),
}
