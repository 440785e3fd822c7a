"""DiffLlama: differential attention (λ from perturbed lambda_q/k vectors, per-layer λ_init)."""

CASES = {
    # Three layers: λ_init differs per layer; wider lambda vectors make λ move further.
    "diffllama": ("diffllama", dict(num_hidden_layers=3, lambda_std_dev=0.5)),
    # Four KV heads (two per half), MHA, biases, tied head, explicit head_dim.
    "diffllama-mha-bias-tied": (
        "diffllama",
        dict(
            num_key_value_heads=4,
            head_dim=24,
            attention_bias=True,
            tie_word_embeddings=True,
        ),
    ),
}
