"""Granite SWA: window 4 < the test sequence, sinks, per-layer RoPE bases incl. NoPE."""

MULTIPLIERS = dict(
    embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.3, logits_scaling=2.5
)

CASES = {
    # Default pattern: layer 0 full, layers 1-3 sliding; one shared RoPE base.
    "granite_swa": ("granite_swa", dict(MULTIPLIERS, num_hidden_layers=4, sliding_window=4)),
    # Layer 0 NoPE, layers 1-2 one base, layer 3 another.
    "granite_swa-layer-thetas-nope-untied-bias": (
        "granite_swa",
        dict(
            MULTIPLIERS,
            num_hidden_layers=4,
            sliding_window=3,
            layer_rope_theta=[0, 10000.0, 10000.0, 500.0],
            tie_word_embeddings=False,
            attention_bias=True,
        ),
    ),
}
