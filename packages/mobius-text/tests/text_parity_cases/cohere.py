"""Cohere: parallel block, interleaved RoPE, per-head qk LayerNorms, logit_scale."""

CASES = {
    "cohere": ("cohere", dict(logit_scale=0.5, layer_norm_eps=1e-3)),
    "cohere-qk-norm-bias-untied": (
        "cohere",
        dict(logit_scale=2.0, use_qk_norm=True, attention_bias=True, tie_word_embeddings=False),
    ),
}
