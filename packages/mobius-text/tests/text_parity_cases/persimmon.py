"""Persimmon: per-head q/k LayerNorm (on and off), partial rotary, relu² MLP, tied and untied heads."""

PERSIMMON = dict(num_key_value_heads=4)  # multi-head only

CASES = {
    "persimmon": ("persimmon", PERSIMMON),
    "persimmon-no-qk-norm-tied-quarter-rotary": (
        "persimmon",
        dict(
            PERSIMMON,
            qk_layernorm=False,
            tie_word_embeddings=True,
            rope_parameters={"rope_theta": 25000.0, "partial_rotary_factor": 0.25},
        ),
    ),
}
