"""Phi-1/2: parallel attention + MLP, partial rotary (default 0.5), biases, q/k LayerNorm, tied head."""

CASES = {
    "phi": ("phi", dict(num_key_value_heads=4)),
    "phi-gqa-qk-norm": ("phi", dict(qk_layernorm=True)),
    # A tied head keeps its own bias.
    "phi-tied-quarter-rotary": (
        "phi",
        dict(
            tie_word_embeddings=True,
            rope_parameters={"rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        ),
    ),
}
