"""NanoChat: weightless norms, reversed RoPE, post-RoPE q/k norms, ReLU² MLP, logit soft-cap."""

CASES = {
    # Larger weights push the logits well past a cap of 2.
    "nanochat": (
        "nanochat",
        dict(initializer_range=0.2, final_logit_softcapping=2.0),
    ),
    "nanochat-tied-bias-uncapped": (
        "nanochat",
        dict(tie_word_embeddings=True, attention_bias=True, final_logit_softcapping=None),
    ),
}
