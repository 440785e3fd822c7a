"""The head split/merge helpers and the tied LM head with a bias, against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.components import Embedding, TiedLMHead, merge_heads, split_heads
from mobius.testing import module_graph, run_module

rng = np.random.default_rng(0)


def test_split_heads_is_one_reshape_and_transpose():
    x = rng.standard_normal((2, 5, 12)).astype(np.float32)
    model = module_graph(lambda op, x: split_heads(op, x, head_dim=4), {"x": x})
    assert [n.op_type for n in model.graph] == ["Constant", "Reshape", "Transpose", "Identity"]
    (y,) = run_module(lambda op, x: split_heads(op, x, head_dim=4), {"x": x})
    np.testing.assert_array_equal(y, x.reshape(2, 5, 3, 4).transpose(0, 2, 1, 3))


def test_merge_heads_undoes_split_heads():
    x = rng.standard_normal((2, 5, 12)).astype(np.float32)
    (y,) = run_module(lambda op, x: merge_heads(op, split_heads(op, x, 3)), {"x": x})
    np.testing.assert_array_equal(y, x)


def test_split_heads_needs_a_size():
    with pytest.raises(ValueError, match="num_heads or head_dim"):
        module_graph(lambda op, x: split_heads(op, x), {"x": np.zeros((1, 1, 4), np.float32)})


def test_tied_head_adds_its_own_bias():
    ids = rng.integers(0, 11, (2, 3))
    table, bias = rng.standard_normal((11, 8)).astype(np.float32), np.arange(11, dtype=np.float32)
    embedding = Embedding(11, 8)
    head = TiedLMHead(embedding, bias=True)
    assert tuple(head.bias.shape) == (11,)
    (y,) = run_module(
        lambda op, ids: head(op, embedding(op, ids)), {"ids": ids}, {"weight": table, "bias": bias}
    )
    np.testing.assert_allclose(y, table[ids] @ table.T + bias, rtol=1e-5, atol=1e-5)
    assert TiedLMHead(embedding).bias is None
