"""Jais 2: relu² non-gated MLP, biased LayerNorms, biases on every projection."""

CASES = {
    "jais2": ("jais2", dict(layer_norm_eps=1e-3)),
    "jais2-no-bias": ("jais2", dict(attention_bias=False, mlp_bias=False)),
}
