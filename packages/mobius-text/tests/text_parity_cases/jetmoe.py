"""JetMoE: 8 attention experts and 8 MLP experts, top-2 each.

``rms_norm_eps`` large enough to matter checks that only the final norm reads it.
"""

CASES = {
    "jetmoe": ("jetmoe", dict(num_local_experts=8, num_experts_per_tok=2, kv_channels=16)),
    "jetmoe-untied-eps": (
        "jetmoe",
        dict(
            num_local_experts=6,
            num_experts_per_tok=2,
            kv_channels=8,
            tie_word_embeddings=False,
            rms_norm_eps=0.1,
        ),
    ),
}
