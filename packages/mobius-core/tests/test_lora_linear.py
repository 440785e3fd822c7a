"""The runtime LoRA component (``mobius.components._lora``): graph inputs with zero-rank
defaults, ``x @ W.T + b`` when none is fed and ``+ x @ A @ B`` when they are; no torch."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnxscript import nn

from mobius.components import Embedding, Linear
from mobius.components._lora import LoRALinear, attach_lora, declare_lora_inputs
from mobius.testing import module_graph

ort = pytest.importorskip("onnxruntime")


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = Linear(6, 5, bias=True)
        self.embed = Embedding(4, 6)

    def forward(self, op, x):
        return self.proj(op, x)


@pytest.fixture(scope="module")
def session():
    """A Block whose ``proj`` was given LoRA inputs, with random weight and bias."""
    block = Block()
    attach_lora(block, {"proj"})
    assert isinstance(block.proj, LoRALinear)
    model = module_graph(block, {"x": np.zeros((2, 3, 6), np.float32)})
    declare_lora_inputs(model.graph)
    rng = np.random.default_rng(0)
    for value in model.graph.initializers.values():
        if value.const_value is None:
            value.const_value = ir.tensor(rng.standard_normal(value.shape).astype(np.float32))
    weights = {n: v.const_value.numpy() for n, v in model.graph.initializers.items()}
    proto = ir.serde.serialize_model(model).SerializeToString()
    return ort.InferenceSession(proto, providers=["CPUExecutionProvider"]), weights


def test_inputs_have_zero_rank_defaults(session):
    session, weights = session
    inputs = {i.name: i.shape for i in session.get_overridable_initializers()}
    assert inputs == {
        "proj.lora_A.MatMul.weight": [6, "proj.lora_rank"],
        "proj.lora_B.MatMul.weight": ["proj.lora_rank", 5],
    }
    assert weights["proj.lora_A.MatMul.weight"].shape == (6, 0)


@pytest.mark.parametrize("rank", [None, 1, 3])
def test_adds_x_a_b(session, rank):
    session, weights = session
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 6)).astype(np.float32)
    expected = x @ weights["proj.weight"] + weights["proj.bias"]  # stored [in, out]
    feeds = {"x": x}
    if rank is not None:
        a = rng.standard_normal((6, rank)).astype(np.float32)
        b = rng.standard_normal((rank, 5)).astype(np.float32)
        feeds |= {"proj.lora_A.MatMul.weight": a, "proj.lora_B.MatMul.weight": b}
        expected = expected + x @ a @ b
    (out,) = session.run(None, feeds)
    np.testing.assert_allclose(out, expected, atol=1e-5)


@pytest.mark.parametrize(
    "name, error, message",
    [("nope", KeyError, "nope"), ("embed", TypeError, "embed is a Embedding, not a Linear")],
)
def test_attach_refuses_what_it_cannot_adapt(name, error, message):
    with pytest.raises(error, match=message):
        attach_lora(Block(), {name})
