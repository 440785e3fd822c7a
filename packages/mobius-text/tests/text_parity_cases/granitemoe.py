"""Granite-MoE and Granite-MoE-Shared: 8 stacked experts, top-2, with non-trivial µP multipliers."""

MULTIPLIERS = dict(
    embedding_multiplier=3.0,
    residual_multiplier=0.5,
    attention_multiplier=0.2,
    logits_scaling=2.5,
)
MOE = dict(num_local_experts=8, num_experts_per_tok=2)

CASES = {
    "granitemoe": ("granitemoe", dict(**MULTIPLIERS, **MOE)),
    "granitemoe-tied-bias": (
        "granitemoe",
        dict(**MULTIPLIERS, **MOE, tie_word_embeddings=True, attention_bias=True),
    ),
    "granitemoeshared": (
        "granitemoeshared",
        dict(**MULTIPLIERS, **MOE, shared_intermediate_size=96),
    ),
    "granitemoeshared-no-shared": (
        "granitemoeshared",
        dict(**MULTIPLIERS, **MOE, shared_intermediate_size=0),
    ),
}
