"""int4 options: the output head (tied or not) and the token embeddings, run in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnxscript import nn

from mobius.components import Embedding, Linear, TiedLMHead
from mobius.passes import dequantize_blocks, quantize_blocks, quantize_int4
from mobius.testing import module_graph

rng = np.random.default_rng(0)
VOCAB, HIDDEN = 40, 96  # 96 is not a multiple of 64 or 128: rows get padded blocks
BLOCKS = [32, 64, 128]


def _model(forward, inputs, params):
    """A unit graph whose output is ``logits`` (as the head pass looks for), weights filled."""
    model = module_graph(forward, inputs)
    model.graph.outputs[0].name = "logits"
    for node in model.graph:
        for value in node.inputs:  # a head-only graph holds the tied table it never gathers
            if value is not None and value.name in params and not value.is_initializer():
                value.const_value = ir.tensor(params[value.name], name=value.name)
                model.graph.register_initializer(value)
    for name, value in model.graph.initializers.items():
        if value.const_value is None:  # a parameter, not a graph constant
            value.const_value = ir.tensor(params[name], name=name)
    return model


def _run(model, inputs):
    proto = ir.serde.serialize_model(model)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


def _dequantized_table(table, block_size, symmetric):
    """``table [vocab, hidden]`` as its int4 rows stand for it (blocks along hidden)."""
    packed, scales, zero_points = quantize_blocks(table.T, block_size, symmetric)
    return dequantize_blocks(packed, scales, zero_points, table.shape[1]).T


def _ops(model):
    return [node.op_type for node in model.graph]


def _tied_lm(embedding, head):
    """ids -> table rows -> (x 0.5) -> tied head: the table feeds a Gather and a Gemm(transB)."""
    return lambda op, ids: head(op, op.Mul(embedding(op, ids), op.Constant(value_float=0.5)))


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("block_size", BLOCKS)
def test_tied_head_gemm_becomes_matmulnbits(symmetric, block_size):
    table = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    head = TiedLMHead(Embedding(VOCAB, HIDDEN))
    x = rng.standard_normal((2, 3, HIDDEN)).astype(np.float32)
    model = _model(lambda op, x: head(op, x), {"x": x}, {"weight": table})
    assert quantize_int4(model, block_size=block_size, symmetric=symmetric, accuracy_level=0) == 1
    assert "Gemm" not in _ops(model) and "MatMulNBits" in _ops(model)
    assert "weight" not in model.graph.initializers  # nothing else reads the float table
    reference = x @ _dequantized_table(table, block_size, symmetric).T
    np.testing.assert_allclose(_run(model, {"x": x}), reference, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("block_size", BLOCKS)
def test_embedding_gather_becomes_gather_block_quantized(symmetric, block_size):
    table = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    embedding = Embedding(VOCAB, HIDDEN)
    ids = np.array([[0, 5, 39], [7, 7, 1]], np.int64)
    model = _model(lambda op, ids: embedding(op, ids), {"input_ids": ids}, {"weight": table})
    options = {"block_size": block_size, "symmetric": symmetric}
    assert quantize_int4(model, **options) == 0  # embeddings are off by default
    assert quantize_int4(model, embeddings=True, **options) == 1
    assert "GatherBlockQuantized" in _ops(model) and "Gather" not in _ops(model)
    packed = model.graph.initializers["weight.int4"]
    assert list(packed.shape) == [VOCAB, -(-HIDDEN // block_size) * block_size // 2]
    reference = _dequantized_table(table, block_size, symmetric)[ids]
    np.testing.assert_array_equal(_run(model, {"input_ids": ids}), reference)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("block_size", BLOCKS)
def test_a_tied_table_is_quantized_once_for_both_ops(symmetric, block_size):
    table = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    embedding = Embedding(VOCAB, HIDDEN)
    ids = np.array([[3, 1, 4, 1, 5]], np.int64)
    model = _model(
        _tied_lm(embedding, TiedLMHead(embedding)), {"input_ids": ids}, {"weight": table}
    )
    options = {"block_size": block_size, "symmetric": symmetric, "accuracy_level": 0}
    assert quantize_int4(model, embeddings=True, **options) == 2
    ops = _ops(model)
    assert "GatherBlockQuantized" in ops and "MatMulNBits" in ops and "Gemm" not in ops
    # One packed table, one set of scales (and zero points): both ops read them.
    names = sorted(name for name in model.graph.initializers if name.startswith("weight"))
    expected = ["weight.int4", "weight.scales"] + ([] if symmetric else ["weight.zero_points"])
    assert names == expected
    for name in expected:
        readers = {use.node.op_type for use in model.graph.initializers[name].uses()}
        assert "MatMulNBits" in readers and readers - {"MatMulNBits"} <= {
            "GatherBlockQuantized",
            "Reshape",
        }
    dequantized = _dequantized_table(table, block_size, symmetric)
    reference = (dequantized[ids] * 0.5) @ dequantized.T
    np.testing.assert_allclose(_run(model, {"input_ids": ids}), reference, rtol=1e-4, atol=1e-4)


def test_lm_head_off_keeps_a_tied_head_float_and_the_table_for_it():
    table = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    embedding = Embedding(VOCAB, HIDDEN)
    ids = np.array([[2, 9]], np.int64)
    model = _model(
        _tied_lm(embedding, TiedLMHead(embedding)), {"input_ids": ids}, {"weight": table}
    )
    assert quantize_int4(model, lm_head=False, embeddings=True, accuracy_level=0) == 1
    assert "Gemm" in _ops(model) and "GatherBlockQuantized" in _ops(model)
    assert "weight" in model.graph.initializers  # the float head still reads it
    reference = (_dequantized_table(table, 32, True)[ids] * 0.5) @ table.T
    np.testing.assert_allclose(_run(model, {"input_ids": ids}), reference, rtol=1e-4, atol=1e-4)


def test_lm_head_on_without_embeddings_keeps_the_float_table_for_the_gather():
    table = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    embedding = Embedding(VOCAB, HIDDEN)
    ids = np.array([[2, 9]], np.int64)
    model = _model(
        _tied_lm(embedding, TiedLMHead(embedding)), {"input_ids": ids}, {"weight": table}
    )
    assert quantize_int4(model, accuracy_level=0) == 1
    assert "Gather" in _ops(model) and "MatMulNBits" in _ops(model)
    assert "weight" in model.graph.initializers
    reference = (table[ids] * 0.5) @ _dequantized_table(table, 32, True).T
    np.testing.assert_allclose(_run(model, {"input_ids": ids}), reference, rtol=1e-4, atol=1e-4)


class _TwoLinears(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj, self.lm_head = Linear(HIDDEN, HIDDEN), Linear(HIDDEN, VOCAB)

    def forward(self, op, x):
        return self.lm_head(op, self.proj(op, x))


def test_lm_head_off_keeps_an_untied_head_matmul_float():
    x = rng.standard_normal((1, 2, HIDDEN)).astype(np.float32)
    weights = {
        "proj.weight": rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32),
        "lm_head.weight": rng.standard_normal((HIDDEN, VOCAB)).astype(np.float32),
    }
    assert quantize_int4(_model(_TwoLinears(), {"x": x}, weights)) == 2  # lm_head is on by default
    model = _model(_TwoLinears(), {"x": x}, weights)
    assert quantize_int4(model, lm_head=False) == 1
    matmul = next(node for node in model.graph if node.op_type == "MatMul")
    assert matmul.inputs[1].name == "lm_head.weight"  # the head stays float
    assert "proj.weight" not in model.graph.initializers
