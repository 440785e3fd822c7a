"""BitNet (unpacked weights): sub-norms before o_proj and down_proj, ReLU² gated MLP."""

CASES = {
    "bitnet": ("bitnet", dict(bos_token_id=1, eos_token_id=2)),
    "bitnet-tied-bias-mqa": (
        "bitnet",
        dict(
            bos_token_id=1,
            eos_token_id=2,
            tie_word_embeddings=True,
            attention_bias=True,
            num_key_value_heads=1,
        ),
    ),
}
