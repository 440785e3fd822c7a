"""Helium: interleaved rotary layout, q/k/v biases without an o_proj bias, MLP biases."""

CASES = {
    # o_proj maps hidden -> hidden, so heads * head_dim must equal hidden_size.
    "helium": ("helium", dict(head_dim=16)),
    "helium-bias-tied-mqa": (
        "helium",
        dict(
            head_dim=16,
            attention_bias=True,
            mlp_bias=True,
            tie_word_embeddings=True,
            num_key_value_heads=1,
        ),
    ),
}
