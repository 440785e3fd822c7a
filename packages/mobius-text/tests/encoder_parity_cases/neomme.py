"""NeoMME (text): factorised embeddings, exclusive gated attention, value embeddings, per-layer windows."""

# Four layers: sliding (window 2), sliding (the long window), sliding (2), global; head_dim 16
# so the global layers' partial rotary (0.25) rotates 4 channels. Two global layers in the
# second case: value embeddings enter the first and the last.
CASES = {
    "neomme": (
        "neomme",
        dict(
            num_hidden_layers=4,
            num_key_value_heads=2,
            head_dim=16,
            embedding_rank=12,
            sliding_window=2,
        ),
        {"heads": ("none", "masked-lm")},
    ),
    "neomme-untied-biased": (
        "neomme",
        dict(
            layer_types=["full_attention", "sliding_attention", "full_attention"],
            num_hidden_layers=3,
            num_key_value_heads=4,
            head_dim=8,
            embedding_rank=12,
            sliding_window=3,
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=False,
            residual_multiplier=0.7,
            rope_parameters={
                "full_attention": {
                    "rope_type": "default",
                    "rope_theta": 500.0,
                    "partial_rotary_factor": 0.5,
                },
                "sliding_attention": {
                    "rope_type": "default",
                    "rope_theta": 100.0,
                    "partial_rotary_factor": 1.0,
                },
            },
        ),
        {"heads": ("none", "masked-lm"), "eps": ("default",)},
    ),
}
