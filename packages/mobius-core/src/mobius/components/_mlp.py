"""Feed-forward blocks."""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components._activations import get_activation
from mobius.components._linear import Linear


class GatedMLP(nn.Module):
    """``down(act(gate(x)) * up(x))``: the SwiGLU / GeGLU block of Llama-style decoders."""

    def __init__(
        self, hidden_size: int, intermediate_size: int, act: str = "silu", bias: bool = False
    ):
        super().__init__()
        self.gate_proj = Linear(hidden_size, intermediate_size, bias)
        self.up_proj = Linear(hidden_size, intermediate_size, bias)
        self.down_proj = Linear(intermediate_size, hidden_size, bias)
        self.act = get_activation(act)

    def forward(self, op, x: ir.Value) -> ir.Value:
        return self.down_proj(op, op.Mul(self.act(op, self.gate_proj(op, x)), self.up_proj(op, x)))


class MLP(nn.Module):
    """``fc2(act(fc1(x)))``: the plain two-layer block of GPT/BERT-style models."""

    def __init__(
        self, hidden_size: int, intermediate_size: int, act: str = "gelu", bias: bool = True
    ):
        super().__init__()
        self.fc1 = Linear(hidden_size, intermediate_size, bias)
        self.fc2 = Linear(intermediate_size, hidden_size, bias)
        self.act = get_activation(act)

    def forward(self, op, x: ir.Value) -> ir.Value:
        return self.fc2(op, self.act(op, self.fc1(op, x)))
