"""EXAONE 4: post-norm layers, q/k norms, sliding RoPE layers beside global NoPE layers."""

CASES = {
    # Pattern 2 over 3 layers: sliding (RoPE, window 4), global (no RoPE), sliding.
    "exaone4": ("exaone4", dict(num_hidden_layers=3, sliding_window=4, sliding_window_pattern=2)),
    # No sliding window: every layer is global and every layer rotates.
    "exaone4-global-tied": (
        "exaone4",
        dict(
            sliding_window=None,
            layer_types=["full_attention", "full_attention"],
            tie_word_embeddings=True,
            head_dim=24,
        ),
    ),
}
