"""Cohere2: sliding layers with RoPE, global layers without; window 4 < the test sequence."""

CASES = {
    # Default pattern of 4: layers 0-2 sliding, layer 3 full (NoPE).
    "cohere2": ("cohere2", dict(num_hidden_layers=4, sliding_window=4, logit_scale=0.5)),
    "cohere2-alternating-bias-untied": (
        "cohere2",
        dict(
            sliding_window=3,
            layer_types=["full_attention", "sliding_attention"],
            attention_bias=True,
            tie_word_embeddings=False,
            logit_scale=2.0,
        ),
    ),
}
