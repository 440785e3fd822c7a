"""GPT-NeoX: parallel and sequential residuals, partial and full rotary, with and without
biases, tied and untied heads."""

CASES = {
    "gpt_neox": ("gpt_neox", dict(rotary_pct=0.25)),
    "gpt_neox-sequential-tied": (
        "gpt_neox",
        dict(use_parallel_residual=False, tie_word_embeddings=True, attention_bias=False),
    ),
    "gpt_neox-full-rotary-linear": (
        "gpt_neox",
        dict(
            rope_parameters={
                "rope_type": "linear",
                "factor": 2.0,
                "rope_theta": 500.0,
                "partial_rotary_factor": 1.0,
            }
        ),
    ),
}
