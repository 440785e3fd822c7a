"""int4 weight-only quantization: RTN blocks, packing, and MatMulNBits in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

from mobius.components import Linear
from mobius.passes import dequantize_blocks, quantize_blocks, quantize_int4
from mobius.testing import module_graph

rng = np.random.default_rng(0)


@pytest.mark.parametrize("symmetric", [True, False])
def test_rtn_error_is_at_most_half_a_step(symmetric):
    w = rng.standard_normal((70, 24)).astype(np.float32)  # K not a multiple of the block
    packed, scales, zero_points = quantize_blocks(w, 32, symmetric)
    assert packed.shape == (24, 3, 16) and packed.dtype == np.uint8
    error = np.abs(dequantize_blocks(packed, scales, zero_points, 70) - w)
    step = np.repeat(scales, 32, axis=1)[:, :70].T  # [K, N]
    assert (error <= step / 2 + 1e-6).all()


def _run_linear(x, weight, bias, **options):
    linear = Linear(weight.shape[1], weight.shape[0], bias=True)
    model = module_graph(lambda op, x: linear(op, x), {"x": x})
    model.graph.initializers["weight"].const_value = ir.tensor(np.ascontiguousarray(weight.T))
    model.graph.initializers["bias"].const_value = ir.tensor(bias)
    assert quantize_int4(model, **options) == 1
    assert [n.op_type for n in model.graph] == ["MatMulNBits", "Add", "Identity"]
    assert "weight" not in model.graph.initializers
    proto = ir.serde.serialize_model(model)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("block_size", [32, 64, 128])
def test_matmulnbits_matches_the_dequantized_weight(symmetric, block_size):
    x = rng.standard_normal((2, 3, 96)).astype(np.float32)
    weight, bias = (
        rng.standard_normal((40, 96)).astype(np.float32),
        rng.standard_normal(40).astype(np.float32),
    )
    y = _run_linear(x, weight, bias, block_size=block_size, symmetric=symmetric, accuracy_level=0)
    packed, scales, zero_points = quantize_blocks(weight.T, block_size, symmetric)
    reference = x @ dequantize_blocks(packed, scales, zero_points, 96) + bias
    np.testing.assert_allclose(y, reference, rtol=1e-4, atol=1e-4)


def test_accuracy_level_4_stays_near_the_dequantized_weight():
    # Level 4 also quantizes activations to int8 per block: measured max abs error
    # 0.22 against outputs up to 35 (0.6%), so the bound is relative (2%).
    x = rng.standard_normal((1, 5, 128)).astype(np.float32)
    weight, bias = rng.standard_normal((64, 128)).astype(np.float32), np.zeros(64, np.float32)
    y = _run_linear(x, weight, bias, block_size=32, symmetric=True, accuracy_level=4)
    packed, scales, zero_points = quantize_blocks(weight.T, 32, True)
    reference = x @ dequantize_blocks(packed, scales, zero_points, 128)
    assert np.abs(y - reference).max() <= 2e-2 * np.abs(reference).max()


def test_unsupported_block_size_is_a_clear_error():
    model = module_graph(lambda op, x: Linear(8, 4)(op, x), {"x": np.zeros((1, 8), np.float32)})
    with pytest.raises(ValueError, match="block size must be one of"):
        quantize_int4(model, block_size=48)
