"""Phi-3: fused qkv/gate_up projections, LongRoPE switching factors mid-decode, partial rotary, sliding window."""


def longrope(rotary_dim: int) -> dict:
    # Original context 8: short factors for the 7-token prompt, long ones once decoding passes 8.
    half = rotary_dim // 2
    return {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "original_max_position_embeddings": 8,
        "short_factor": [1.0 + 0.1 * i for i in range(half)],
        "long_factor": [1.5 + 0.3 * i for i in range(half)],
    }


PHI3 = dict(bos_token_id=1, eos_token_id=2)

CASES = {
    "phi3": ("phi3", PHI3),
    # Phi-3-mini-128k style: LongRoPE, max/original = 4 sets the attention factor.
    "phi3-longrope": (
        "phi3",
        dict(
            PHI3,
            max_position_embeddings=32,
            original_max_position_embeddings=8,
            rope_parameters=longrope(16),
        ),
    ),
    # Phi-4-mini style: LongRoPE on 3/4 of each head, tied head, GQA.
    "phi3-longrope-partial-tied": (
        "phi3",
        dict(
            PHI3,
            max_position_embeddings=32,
            original_max_position_embeddings=8,
            tie_word_embeddings=True,
            rope_parameters={**longrope(12), "partial_rotary_factor": 0.75},
        ),
    ),
    "phi3-sliding": ("phi3", dict(PHI3, sliding_window=4, num_key_value_heads=4)),
}
