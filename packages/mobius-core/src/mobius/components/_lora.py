"""Runtime (unmerged) LoRA: a Linear plus ``x @ A @ B`` whose ``A`` and ``B`` are graph inputs.

onnxruntime-genai's multi-LoRA runs one base graph with several adapters: each
``.onnx_adapter`` file holds tensors named after graph inputs, and the active one
is fed to the session in their place (``Generator.set_active_adapter``). So each
adapted projection ``M`` here gets two inputs, named as onnxruntime-genai's own
model builder names its LoRA weights (``<M>.lora_A.MatMul.weight`` and
``<M>.lora_B.MatMul.weight``, transposed for ``MatMul``):

- ``<M>.lora_A.MatMul.weight`` ``[in, <M>.lora_rank]``: peft's ``lora_A`` ``[r, in]``
  transposed;
- ``<M>.lora_B.MatMul.weight`` ``[<M>.lora_rank, out]``: peft's ``lora_B`` ``[out, r]``
  transposed and multiplied by the adapter's scale (``alpha / r``), as that builder
  folds it, so no third input is needed.

Each input also has an initializer of the same name with a zero-sized rank (ONNX's
overridable default): with no adapter active, ``x @ A @ B`` is an exact zero and the
graph computes the base model. The rank is a dim of its own per module, so adapters
of different ranks (and ``rank_pattern``) share one graph.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components._linear import Linear

#: Marks a value as a LoRA input (:func:`declare_lora_inputs` makes it a graph input).
LORA_INPUT = "mobius.lora_input"
LORA_A, LORA_B = "lora_A.MatMul.weight", "lora_B.MatMul.weight"


def lora_input_names(module: str) -> tuple[str, str]:
    """The graph input names of adapted module ``module``'s ``A`` and ``B``."""
    return f"{module}.{LORA_A}", f"{module}.{LORA_B}"


class LoRALinear(Linear):
    """:class:`Linear` ``y = x @ W.T + b`` plus ``x @ A @ B`` from graph inputs (module doc).

    Its own parameters are the base layer's (``weight``, ``bias``), so checkpoint names
    are unchanged; ``A`` and ``B`` are not parameters and take no checkpoint tensor.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__(in_features, out_features, bias)
        self.in_features, self.out_features = in_features, out_features

    def forward(self, op, x: ir.Value) -> ir.Value:
        dtype = self.weight.dtype.numpy()
        a = op.initializer(ir.tensor(np.zeros((self.in_features, 0), dtype)), LORA_A)
        b = op.initializer(ir.tensor(np.zeros((0, self.out_features), dtype)), LORA_B)
        rank = a.name[: -len(LORA_A)] + "lora_rank"
        a.shape, b.shape = ir.Shape([self.in_features, rank]), ir.Shape([rank, self.out_features])
        a.meta[LORA_INPUT] = b.meta[LORA_INPUT] = True
        return op.Add(super().forward(op, x), op.MatMul(op.MatMul(x, a), b))


def attach_lora(module: nn.Module, names) -> None:
    """Replace each :class:`Linear` of ``module`` named in ``names`` by a :class:`LoRALinear`.

    ``names`` are module paths (``model.layers.0.self_attn.q_proj``). The replacement
    takes over the base layer's parameters. Raises ``KeyError`` naming the first path that
    is no submodule, ``TypeError`` for one that is no plain :class:`Linear`.
    """
    found = dict(module.named_modules())
    for name in sorted(names):
        target = found.get(name)
        if target is None:
            raise KeyError(name)
        if type(target) is not Linear:  # a subclass may compute otherwise (and LoRALinear)
            raise TypeError(f"{name} is a {type(target).__name__}, not a Linear")
        parent_name, _, attr = name.rpartition(".")
        parent = found[parent_name]
        if isinstance(parent, nn.ModuleList):
            raise TypeError(f"{name} is an item of a list, not a named projection")
        out_features, in_features = target.weight.checkpoint_shape
        lora = LoRALinear(in_features, out_features)
        lora.weight, lora.bias = target.weight, target.bias  # the base layer's, as they are
        setattr(parent, attr, lora)


def declare_lora_inputs(graph: ir.Graph) -> None:
    """Make the LoRA values :class:`LoRALinear` made graph inputs (after the others), each
    keeping its zero-rank initializer as the default the session uses when none is fed."""
    for value in graph.initializers.values():
        if value.meta.get(LORA_INPUT) and value not in graph.inputs:
            graph.inputs.append(value)
