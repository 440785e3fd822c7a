"""Rounding methods on real weights: SmolLM2-135M's projections, as its GGUF dequantizes them.

HQQ must lower the reconstruction error of round-to-nearest, 4-bit and 8-bit,
symmetric and asymmetric; 8-bit blocks must be nearly exact. (SmolLM2's weights
come from Q4_1 blocks, so they sit on a 4-bit grid per block of 32: asymmetric
round-to-nearest recovers each block's step, which leaves HQQ less to gain
there than on float checkpoints; see benchmarks/README.md.)
"""

from __future__ import annotations

import numpy as np
import pytest

from mobius.passes import dequantize_blocks, quantize_blocks
from mobius_text.gguf import GGUFCheckpoint
from mobius_text.testing import smollm2_gguf

# One of each projection kind, from three depths (about 5.6M values).
NAMES = [
    f"model.layers.{layer}.{kind}.weight"
    for layer in (2, 15, 28)
    for kind in ("self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj")
]


@pytest.fixture(scope="module")
def weights():
    """The projections in MatMul layout ``[K, N]``."""
    checkpoint = GGUFCheckpoint.open(smollm2_gguf())
    try:
        return [np.ascontiguousarray(checkpoint[name].numpy().T) for name in NAMES]
    finally:
        checkpoint.close()


def _relative_error(weights, bits, symmetric, method) -> float:
    error = total = 0.0
    for w in weights:
        packed, scales, zero_points = quantize_blocks(w, 32, symmetric, bits=bits, method=method)
        restored = dequantize_blocks(packed, scales, zero_points, w.shape[0], bits)
        error += float(((restored - w) ** 2).sum())
        total += float((w**2).sum())
    return error / total


@pytest.mark.parametrize("symmetric", [True, False])
def test_hqq_beats_rtn_on_smollm2_weights(weights, symmetric):
    rtn = _relative_error(weights, 4, symmetric, "rtn")
    hqq = _relative_error(weights, 4, symmetric, "hqq")
    # Measured: symmetric 0.0104 -> 0.0064, asymmetric 0.0069 -> 0.0054.
    assert hqq < 0.85 * rtn, (hqq, rtn)


@pytest.mark.parametrize("symmetric", [True, False])
def test_int8_is_nearly_exact_with_either_method(weights, symmetric):
    rtn4 = _relative_error(weights, 4, symmetric, "rtn")
    rtn8 = _relative_error(weights, 8, symmetric, "rtn")
    hqq8 = _relative_error(weights, 8, symmetric, "hqq")
    # Measured: 8-bit error about 1/300 of 4-bit's (3.1e-5 symmetric, 2.4e-5 not);
    # hqq takes about a fifth off it.
    assert rtn8 < rtn4 / 100, (rtn8, rtn4)
    assert hqq8 <= rtn8, (hqq8, rtn8)
