"""GLM and GLM-4-0414: interleaved partial rotary, q/k/v biases, fused gate_up MLP, glm4's post-norms."""

# transformers' GLM defaults head_dim to 128; real configs set it.
GLM = dict(head_dim=16, eos_token_id=2)

CASES = {
    "glm": ("glm", GLM),
    "glm-full-rotary-tied": (
        "glm",
        dict(
            GLM,
            head_dim=24,
            tie_word_embeddings=True,
            rope_parameters={"rope_theta": 10000.0, "partial_rotary_factor": 1.0},
        ),
    ),
    "glm4": ("glm4", GLM),
    "glm4-mqa-no-bias": ("glm4", dict(GLM, num_key_value_heads=1, attention_bias=False)),
}
