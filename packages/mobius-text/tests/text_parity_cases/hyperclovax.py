"""HyperCLOVA X: Granite's multipliers (all away from 1), post-norms on and off."""

MULTIPLIERS = dict(embedding_multiplier=3.0, residual_multiplier=0.5, logits_scaling=2.5)

CASES = {
    # attention_multiplier left unset: the config defaults it to head_dim ** -0.5.
    "hyperclovax": ("hyperclovax", MULTIPLIERS),
    "hyperclovax-no-post-norm-tied": (
        "hyperclovax",
        dict(
            MULTIPLIERS,
            use_post_norm=False,
            attention_multiplier=0.3,
            head_dim=24,
            tie_word_embeddings=True,
        ),
    ),
}
