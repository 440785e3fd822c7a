"""GPT-2: tied and untied heads, layer-index score scaling, unscaled scores, another activation."""

CASES = {
    "gpt2": ("gpt2", dict(n_inner=96)),
    "gpt2-untied": ("gpt2", dict(tie_word_embeddings=False)),
    "gpt2-inverse-layer-scale": (
        "gpt2",
        dict(scale_attn_by_inverse_layer_idx=True, reorder_and_upcast_attn=True),
    ),
    # GPT-SW3: GPT-2 under another model_type (its tokenizer is what differs).
    "gpt-sw3": ("gpt-sw3", dict(n_inner=128, activation_function="gelu")),
    "gpt2-unscaled-relu": ("gpt2", dict(scale_attn_weights=False, activation_function="relu")),
}
