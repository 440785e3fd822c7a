"""StableLM: partial rotary (default 0.25), per-head q/k LayerNorm, qkv biases, parallel residual."""

CASES = {
    "stablelm": ("stablelm", {}),
    # StableLM-2-12B style: per-head q/k norms and the parallel residual, GQA.
    "stablelm-qk-norm-parallel": (
        "stablelm",
        dict(qk_layernorm=True, use_parallel_residual=True),
    ),
    # StableLM-2-1.6B style: q/k/v biases, MHA, tied head, half rotary.
    "stablelm-qkv-bias-tied": (
        "stablelm",
        dict(
            use_qkv_bias=True,
            num_key_value_heads=4,
            tie_word_embeddings=True,
            rope_parameters={"rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        ),
    ),
}
