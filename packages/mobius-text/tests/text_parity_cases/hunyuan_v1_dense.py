"""Hunyuan V1 Dense: post-RoPE q/k norms; the fixed NTK-alpha rope of its checkpoints."""

CASES = {
    "hunyuan_v1_dense": ("hunyuan_v1_dense", dict(head_dim=16)),
    "hunyuan_v1_dense-ntk-alpha-bias-tied": (
        "hunyuan_v1_dense",
        dict(
            head_dim=24,
            attention_bias=True,
            tie_word_embeddings=True,
            rope_parameters={
                "rope_type": "dynamic",
                "rope_theta": 10000.0,
                "alpha": 50.0,
                "factor": 1.0,
            },
        ),
    ),
}
