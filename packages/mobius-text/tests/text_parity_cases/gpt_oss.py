"""GPT-OSS: attention sinks, alternating sliding/full layers, clamped-SwiGLU top-k experts.

The sliding window (4) is shorter than the 15-token test sequence; the SwiGLU limit
is small enough that the clamps cut many gate/up values; sinks and router biases are
perturbed like every other parameter.
"""

GPT_OSS = dict(
    head_dim=16,
    num_local_experts=4,
    num_experts_per_tok=2,
    sliding_window=4,
    swiglu_limit=0.3,
    swiglu_alpha=1.5,
)

CASES = {
    # The default rope (YaRN, factor 32, original context 4096, truncate off).
    "gpt_oss": ("gpt_oss", GPT_OSS),
    "gpt_oss-yarn-mha-top1": (
        "gpt_oss",
        dict(
            GPT_OSS,
            num_key_value_heads=4,
            num_experts_per_tok=1,
            layer_types=["full_attention", "sliding_attention"],
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 16,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "truncate": True,
            },
        ),
    ),
    "gpt_oss-tied": ("gpt_oss", dict(GPT_OSS, tie_word_embeddings=True, num_key_value_heads=1)),
}
