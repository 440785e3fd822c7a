"""Llama and its close variants: Mistral, Ministral, Qwen2, Qwen3, SmolLM3.

Variants exercise the config paths that change the graph: tied embeddings,
biases, GQA/MQA/MHA, explicit head_dim, sliding windows, and each RoPE scaling
type (with context limits small enough that the dynamic types switch schedule
during the test).
"""

ROPE_SCALING = {
    "linear": {"rope_type": "linear", "factor": 2.0},
    # max_position_embeddings 8: the 7-token prompt fits, decoding grows past it.
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "llama3": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    },
    "yarn": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 16,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
    },
    # original context 8: short factors for the prompt, long factors once decoding passes it.
    "longrope": {
        "rope_type": "longrope",
        "original_max_position_embeddings": 8,
        "short_factor": [1.0 + 0.1 * i for i in range(8)],
        "long_factor": [1.5 + 0.3 * i for i in range(8)],
    },
}

CASES = {
    "llama": ("llama", {}),
    "llama-tied": ("llama", dict(tie_word_embeddings=True)),
    "llama-bias": ("llama", dict(attention_bias=True, mlp_bias=True)),
    "llama-mqa": ("llama", dict(num_key_value_heads=1)),
    "llama-mha-head-dim": ("llama", dict(num_key_value_heads=4, head_dim=24)),
    **{
        f"llama-rope-{kind}": (
            "llama",
            dict(
                rope_parameters={"rope_theta": 10000.0, **params},
                max_position_embeddings=8 if kind == "dynamic" else 32,
            ),
        )
        for kind, params in ROPE_SCALING.items()
    },
    "mistral": ("mistral", {}),
    "mistral-sliding": ("mistral", dict(sliding_window=4)),
    # transformers' Ministral reads head_dim without a fallback; real configs set it.
    "ministral": ("ministral", dict(sliding_window=4, head_dim=16)),
    "ministral-alternating": (
        "ministral",
        dict(sliding_window=4, head_dim=16, layer_types=["sliding_attention", "full_attention"]),
    ),
    "qwen2": ("qwen2", {}),
    "qwen2-tied-sliding": (
        "qwen2",
        dict(
            tie_word_embeddings=True, use_sliding_window=True, sliding_window=4, max_window_layers=1
        ),
    ),
    "qwen3": ("qwen3", {}),
    "qwen3-tied-bias": ("qwen3", dict(tie_word_embeddings=True, attention_bias=True)),
    "smollm3": ("smollm3", dict(no_rope_layer_interval=2)),
    "smollm3-sliding": (
        "smollm3",
        dict(no_rope_layer_interval=2, use_sliding_window=True, sliding_window=4),
    ),
}
