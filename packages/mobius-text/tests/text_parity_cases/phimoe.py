"""PhiMoE: 8 experts through the sparse mixer (top-2).

A large ``router_jitter_noise`` makes the relative-threshold mask keep some experts
and drop others, so the softmax weights are neither one-hot nor plain softmax.
The LongRoPE case switches from the short to the long mscale during decoding.
"""

MOE = dict(num_local_experts=8, num_experts_per_tok=2)

CASES = {
    "phimoe": ("phimoe", dict(**MOE, router_jitter_noise=0.5)),
    "phimoe-default-jitter-bias": (
        "phimoe",
        dict(**MOE, attention_bias=True, lm_head_bias=True, sliding_window=4),
    ),
    "phimoe-longrope": (
        "phimoe",
        dict(
            **MOE,
            router_jitter_noise=0.5,
            max_position_embeddings=32,
            rope_parameters={
                "rope_type": "longrope",
                "rope_theta": 10000.0,
                "original_max_position_embeddings": 8,
                "short_factor": [1.0 + 0.1 * i for i in range(8)],
                "long_factor": [1.5 + 0.3 * i for i in range(8)],
                "short_mscale": 1.1,
                "long_mscale": 1.3,
            },
        ),
    ),
}
