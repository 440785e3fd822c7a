"""Nemotron: LayerNorm1P, relu² non-gated MLP, partial rotary (default 0.5), biases on and off."""

CASES = {
    "nemotron": ("nemotron", dict(eos_token_id=2, bos_token_id=1)),
    "nemotron-bias-tied-head-dim": (
        "nemotron",
        dict(
            eos_token_id=2,
            bos_token_id=1,
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=True,
            head_dim=24,
        ),
    ),
}
