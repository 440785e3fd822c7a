"""Cohere Compass (text): rotate-half RoPE per layer type, NoPE full layers, sliding window."""

SLIDING_ROPE = {"rope_type": "default", "rope_theta": 1000.0}

CASES = {
    # Sliding layers with RoPE (window 4 < the test sequence), full layers without; scaled logits
    "cohere_compass_text-sliding-nope": (
        "cohere_compass_text",
        dict(
            num_hidden_layers=4,
            layer_types=["sliding_attention", "full_attention"] * 2,
            sliding_window=4,
            rope_parameters={"sliding_attention": SLIDING_ROPE, "full_attention": None},
            logit_scale=0.5,
        ),
    ),
    # Every layer full with its own theta; no logit_scale (None: unscaled), attention biases,
    # an untied head
    "cohere_compass_text-full-rope-bias-untied": (
        "cohere_compass_text",
        dict(
            rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 500.0}},
            attention_bias=True,
            tie_word_embeddings=False,
        ),
    ),
}
