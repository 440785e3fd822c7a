"""Activation functions, by their HuggingFace ``hidden_act`` names."""

from __future__ import annotations

from collections.abc import Callable

import onnx_ir as ir


def silu(op, x: ir.Value) -> ir.Value:
    return op.Mul(x, op.Sigmoid(x))


def gelu(op, x: ir.Value) -> ir.Value:
    return op.Gelu(x, approximate="none")


def gelu_tanh(op, x: ir.Value) -> ir.Value:
    return op.Gelu(x, approximate="tanh")


def quick_gelu(op, x: ir.Value) -> ir.Value:
    return op.Mul(x, op.Sigmoid(op.Mul(x, 1.702)))


def relu(op, x: ir.Value) -> ir.Value:
    return op.Relu(x)


def relu2(op, x: ir.Value) -> ir.Value:
    relu_x = op.Relu(x)
    return op.Mul(relu_x, relu_x)


def tanh(op, x: ir.Value) -> ir.Value:
    return op.Tanh(x)


def softcap(op, x: ir.Value, cap: float) -> ir.Value:
    """``cap * tanh(x / cap)``: squashes ``x`` smoothly into ``(-cap, cap)`` (Gemma 2, Grok...)."""
    return op.Mul(op.Tanh(op.Div(x, cap)), cap)


ACTIVATIONS: dict[str, Callable[..., ir.Value]] = {
    "silu": silu,
    "swish": silu,
    "gelu": gelu,
    "gelu_python": gelu,
    "gelu_tanh": gelu_tanh,
    "gelu_new": gelu_tanh,
    "gelu_pytorch_tanh": gelu_tanh,
    "gelu_fast": gelu_tanh,
    "quick_gelu": quick_gelu,
    "relu": relu,
    "relu2": relu2,
    "tanh": tanh,
}


def get_activation(name: str) -> Callable[..., ir.Value]:
    """Return the graph-building function of an HF activation name (``"silu"``, ``"gelu_new"``...)."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        known = ", ".join(sorted(ACTIVATIONS))
        raise ValueError(f"unsupported activation {name!r}; known: {known}") from None
