"""OLMo 3: sliding window 4 < the test sequence; YaRN on full-attention layers only."""

CASES = {
    # Default pattern of 4: layers 0-2 sliding, layer 3 full.
    "olmo3": ("olmo3", dict(num_hidden_layers=4, sliding_window=4)),
    "olmo3-yarn-full-layers": (
        "olmo3",
        dict(
            sliding_window=3,
            layer_types=["full_attention", "sliding_attention"],
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {
                    "rope_type": "yarn",
                    "rope_theta": 500000.0,
                    "factor": 4.0,
                    "original_max_position_embeddings": 16,
                },
            },
        ),
    ),
}
