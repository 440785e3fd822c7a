"""Apertus: xIELU (learned alphas perturbed; inputs on both sides of 0), per-head q/k norms."""

CASES = {
    "apertus": ("apertus", {}),
    "apertus-bias-tied-rope-default": (
        "apertus",
        dict(
            attention_bias=True,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
    ),
}
