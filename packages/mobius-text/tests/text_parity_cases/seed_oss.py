"""Seed-OSS: q/k/v biases on by default, the o_proj bias set separately."""

CASES = {
    "seed_oss": ("seed_oss", dict(head_dim=16)),
    "seed_oss-out-bias-mlp-bias": (
        "seed_oss",
        dict(head_dim=24, attention_out_bias=True, mlp_bias=True),
    ),
    "seed_oss-no-qkv-bias-tied": (
        "seed_oss",
        dict(head_dim=16, attention_bias=False, tie_word_embeddings=True),
    ),
}
