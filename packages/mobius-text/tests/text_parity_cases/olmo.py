"""OLMo: weightless LayerNorms; clip_qkv small enough to clamp the perturbed projections."""

CASES = {
    "olmo": ("olmo", {}),
    "olmo-clip-bias-tied": (
        "olmo",
        dict(clip_qkv=0.05, attention_bias=True, tie_word_embeddings=True),
    ),
}
