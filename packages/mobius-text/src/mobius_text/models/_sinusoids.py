"""Fixed sinusoidal position tables of the BART lineage, computed as transformers computes them.

Checkpoints rarely carry these tables (transformers rebuilds them at load), so the
models ask for them as parameters and ``sanitize`` supplies them, computed
here, when the checkpoint has none.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from mobius.components import check_constant_size
from mobius.weights import DerivedTensor


def split_sinusoids(num_positions: int, dim: int) -> np.ndarray:
    """Marian's and Pegasus's table: sines in the first half of each row, cosines in the second.

    ``pos / 10000 ** (2 * (j // 2) / dim)`` in float64, then float32, as transformers does.
    """
    check_constant_size(
        (num_positions, dim), 8, "sinusoidal position table", "max_position_embeddings"
    )
    j = np.arange(dim)
    angles = np.arange(num_positions)[:, None] / np.power(10000, 2 * (j // 2) / dim)[None, :]
    sentinel = (dim + 1) // 2
    table = np.empty((num_positions, dim), np.float32)
    table[:, :sentinel] = np.sin(angles[:, 0::2])
    table[:, sentinel:] = np.cos(angles[:, 1::2])
    return table


def tensor2tensor_sinusoids(num_positions: int, dim: int, padding_idx: int | None) -> np.ndarray:
    """M2M-100's table (fairseq/tensor2tensor): ``[sin | cos]`` of float32 angles, the pad row zero."""
    check_constant_size(
        (num_positions, dim), 4, "sinusoidal position table", "max_position_embeddings"
    )
    half = dim // 2
    step = np.float32(math.log(10000) / (half - 1))
    frequencies = np.exp(np.arange(half, dtype=np.float32) * -step)
    angles = np.arange(num_positions, dtype=np.float32)[:, None] * frequencies[None, :]
    table = np.concatenate([np.sin(angles), np.cos(angles)], axis=1)
    if dim % 2:
        table = np.concatenate([table, np.zeros((num_positions, 1), np.float32)], axis=1)
    if padding_idx is not None:
        table[padding_idx] = 0
    return table.astype(np.float32)


def table_tensor(table: np.ndarray) -> DerivedTensor:
    """A computed table as a checkpoint tensor for ``sanitize``."""
    return DerivedTensor(lambda: table, table.shape, ir.DataType.FLOAT)


def supply_position_tables(
    weights: dict, table: np.ndarray, stacks: tuple[str, ...] = ("encoder", "decoder")
) -> dict:
    """Give the stacks' ``embed_positions`` the computed ``table`` where the checkpoint has none."""
    for stack in stacks:
        weights.setdefault(f"model.{stack}.embed_positions.weight", table_tensor(table))
    return weights
