"""Unit tests of the components: op types, parameter layout, and numerics against numpy."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components import (
    MLP,
    Attention,
    GatedMLP,
    LayerNorm,
    Linear,
    RMSNorm,
    apply_rotary,
    attention_bias,
    get_activation,
    make_rotary_embedding,
)
from mobius.config import RopeConfig
from mobius.testing import module_graph, run_module

rng = np.random.default_rng(0)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def op_types(model: ir.Model) -> list[str]:
    return [node.op_type for node in model.graph]


def test_linear_keeps_weight_as_in_out_and_reads_checkpoint_as_out_in():
    linear = Linear(8, 4, bias=True)
    assert tuple(linear.weight.shape) == (8, 4)
    assert linear.weight.checkpoint_shape == (4, 8)
    x, w, b = randn(2, 3, 8), randn(4, 8), randn(4)
    model = module_graph(lambda op, x: linear(op, x), {"x": x})
    assert op_types(model).count("MatMul") == 1 and "Transpose" not in op_types(model)
    (y,) = run_module(lambda op, x: Linear(8, 4, True)(op, x), {"x": x}, {"weight": w.T, "bias": b})
    np.testing.assert_allclose(y, x @ w.T + b, rtol=1e-5, atol=1e-5)


def test_linear_without_bias_has_no_add():
    model = module_graph(lambda op, x: Linear(8, 4)(op, x), {"x": randn(1, 8)})
    assert op_types(model) == ["MatMul", "Identity"]


def test_rms_norm_matches_numpy():
    x, w = randn(2, 5, 16), randn(16)
    (y,) = run_module(lambda op, x: RMSNorm(16, 1e-5)(op, x), {"x": x}, {"weight": w})
    expected = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_matches_numpy(bias):
    x, w, b = randn(2, 5, 16), randn(16), randn(16)
    params = {"weight": w, "bias": b} if bias else {"weight": w}
    (y,) = run_module(lambda op, x: LayerNorm(16, 1e-5, bias)(op, x), {"x": x}, params)
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    expected = (x - mean) / np.sqrt(var + 1e-5) * w + (b if bias else 0)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


def _gelu(x):
    from math import erf

    return x * 0.5 * (1 + np.vectorize(erf)(x / np.sqrt(2)))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


ACTIVATIONS = {
    "silu": lambda x: x / (1 + np.exp(-x)),
    "gelu": _gelu,
    "gelu_pytorch_tanh": _gelu_tanh,
    "quick_gelu": lambda x: x / (1 + np.exp(-1.702 * x)),
    "relu": lambda x: np.maximum(x, 0),
    "relu2": lambda x: np.maximum(x, 0) ** 2,
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_matches_numpy(name):
    x = randn(4, 16)
    (y,) = run_module(lambda op, x: get_activation(name)(op, x), {"x": x})
    np.testing.assert_allclose(y, ACTIVATIONS[name](x), rtol=1e-4, atol=1e-5)


def test_unknown_activation_is_a_clear_error():
    with pytest.raises(ValueError, match="unsupported activation 'nope'"):
        get_activation("nope")


def test_gated_mlp_matches_numpy():
    x, g, u, d = randn(2, 3, 8), randn(16, 8), randn(16, 8), randn(8, 16)
    params = {"gate_proj.weight": g.T, "up_proj.weight": u.T, "down_proj.weight": d.T}
    (y,) = run_module(lambda op, x: GatedMLP(8, 16, "silu")(op, x), {"x": x}, params)
    silu = ACTIVATIONS["silu"]
    np.testing.assert_allclose(y, (silu(x @ g.T) * (x @ u.T)) @ d.T, rtol=1e-4, atol=1e-5)


def test_plain_mlp_matches_numpy():
    x, w1, b1, w2, b2 = randn(2, 8), randn(16, 8), randn(16), randn(8, 16), randn(8)
    params = {"fc1.weight": w1.T, "fc1.bias": b1, "fc2.weight": w2.T, "fc2.bias": b2}
    (y,) = run_module(lambda op, x: MLP(8, 16, "relu")(op, x), {"x": x}, params)
    np.testing.assert_allclose(y, np.maximum(x @ w1.T + b1, 0) @ w2.T + b2, rtol=1e-4, atol=1e-5)


def _rotate_half_reference(x, cos, sin, rotary_dim):
    """HF's partial rotary: rotate the first ``rotary_dim`` channels, pass the rest."""
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    cos = np.concatenate([cos, cos], -1)[:, None]  # [batch, 1, seq, rotary_dim]
    sin = np.concatenate([sin, sin], -1)[:, None]
    half = rotary_dim // 2
    rotated = np.concatenate([-rot[..., half:], rot[..., :half]], -1)
    return np.concatenate([rot * cos + rotated * sin, rest], -1)


@pytest.mark.parametrize("rotary_dim", [16, 8])
def test_apply_rotary_full_and_partial(rotary_dim):
    x = randn(2, 3, 5, 16)  # [batch, heads, seq, head_dim]
    cos, sin = randn(2, 5, rotary_dim // 2), randn(2, 5, rotary_dim // 2)
    (y,) = run_module(
        lambda op, x, c, s: apply_rotary(op, x, c, s, rotary_dim), {"x": x, "c": cos, "s": sin}
    )
    np.testing.assert_allclose(y, _rotate_half_reference(x, cos, sin, rotary_dim), atol=1e-5)


@pytest.mark.parametrize(
    "params",
    [
        {"rope_type": "default"},
        {"rope_type": "linear", "factor": 4.0},
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
        {"rope_type": "default", "partial_rotary_factor": 0.5},
    ],
    ids=lambda p: p["rope_type"] + ("-partial" if "partial_rotary_factor" in p else ""),
)
def test_static_rope_schedules_match_transformers(params):
    torch = pytest.importorskip("torch")  # noqa: F841  (transformers' rope code needs it)
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    hf = AutoConfig.for_model(
        "stablelm",
        hidden_size=64,
        num_attention_heads=2,
        max_position_embeddings=256,
        rope_parameters={"rope_theta": 500000.0, **params},
    )
    rope = RopeConfig.from_hf(hf)
    module = make_rotary_embedding(rope, 32, 256)
    if params["rope_type"] == "default":
        dim = int(32 * hf.rope_parameters["partial_rotary_factor"])  # StableLM defaults to 0.25
        expected = 1.0 / (500000.0 ** (np.arange(0, dim, 2) / dim))
        scaling = 1.0
    else:
        inv_freq, scaling = ROPE_INIT_FUNCTIONS[params["rope_type"]](hf, "cpu")
        expected = inv_freq.numpy()
    np.testing.assert_allclose(module.inv_freq, expected, rtol=1e-6)
    assert module.attention_scaling == pytest.approx(scaling)


def test_attention_bias_causal_padding_and_window():
    mask = np.array([[0, 1, 1, 1, 1]], dtype=np.int64)  # one left pad, 5 positions in all
    ids = np.zeros((1, 2), dtype=np.int64)  # the last two positions are queries

    def forward(op, mask, ids):
        seq = op.Squeeze(op.Slice(op.Shape(ids), [1], [2]), [0])
        return attention_bias(op, mask, seq, ir.DataType.FLOAT, sliding_window=2)

    (bias,) = run_module(forward, {"mask": mask, "ids": ids})
    visible = bias[0, 0] == 0
    # query 3 sees keys 2..3 (window 2); query 4 sees keys 3..4; key 0 is padding.
    assert visible.tolist() == [
        [False, False, True, True, False],
        [False, False, False, True, True],
    ]
    assert np.isfinite(bias).all()


def test_attention_graph_uses_one_attention_op_with_gqa():
    def forward(op, x, bias, past_key, past_value):
        attention = Attention(32, num_heads=4, num_kv_heads=2, head_dim=8)
        y, (key, value) = attention(op, x, None, bias, past_key, past_value)
        return y, key, value

    inputs = {
        "x": randn(1, 3, 32),
        "bias": np.zeros((1, 1, 3, 5), np.float32),
        "past_key": randn(1, 2, 2, 8),
        "past_value": randn(1, 2, 2, 8),
    }
    model = module_graph(forward, inputs)
    assert op_types(model).count("Attention") == 1
    params = {
        name: randn(*value.shape)
        for name, value in model.graph.initializers.items()
        if value.const_value is None
    }
    y, key, value = run_module(forward, inputs, params)
    assert y.shape == (1, 3, 32) and key.shape == (1, 2, 5, 8) and value.shape == (1, 2, 5, 8)
    np.testing.assert_array_equal(key[:, :, :2], inputs["past_key"])
