"""ESM C: Llama-shaped bidirectional layers with QK-LayerNorm and scaled residual branches."""

CASES = {
    "esmc": (
        "esmc",
        dict(num_labels=3, rope_parameters={"rope_type": "default", "rope_theta": 1000.0}),
    ),
    "esmc-biased-three-layers": (
        "esmc",
        dict(num_hidden_layers=3, attention_bias=True, mlp_bias=True, hidden_act="gelu"),
        {"heads": ("none", "masked-lm")},
    ),
}
