"""Granite: µP multipliers, all set away from 1 so each one changes the logits."""

MULTIPLIERS = dict(
    embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.3, logits_scaling=2.5
)

CASES = {
    "granite": ("granite", MULTIPLIERS),
    "granite-tied-bias": (
        "granite",
        dict(MULTIPLIERS, tie_word_embeddings=True, attention_bias=True, mlp_bias=True),
    ),
}
