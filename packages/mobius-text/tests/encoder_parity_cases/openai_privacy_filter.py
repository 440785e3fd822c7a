"""OpenAI Privacy Filter: GPT-OSS layers (sinks, top-k experts), bidirectional sliding window."""

CASES = {
    # YaRN rope (the config's default), grouped KV heads, window 2 both sides
    "openai_privacy_filter": (
        "openai_privacy_filter",
        dict(
            intermediate_size=24,
            num_key_value_heads=2,
            head_dim=8,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=2,
            num_labels=5,
        ),
        {"heads": ("token-classification",)},  # last_hidden_state is compared too
    ),
    "openai_privacy_filter-plain-rope-unbiased": (
        "openai_privacy_filter",
        dict(
            intermediate_size=24,
            num_key_value_heads=4,
            head_dim=16,
            num_local_experts=3,
            num_experts_per_tok=1,
            sliding_window=4,
            attention_bias=False,
            swiglu_limit=0.5,
            rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
            num_labels=3,
        ),
        {"heads": ("token-classification",), "eps": ("default",)},
    ),
}
