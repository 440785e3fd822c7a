"""How the int4 pass rounds a float weight: block width, method, and which weights get 8 bits.

With ``mix="sensitive"`` the weights 4 bits hurt most keep 8 bits, as
llama.cpp's Q4_K_M mix gives them 6: the output head, and the attention value
and MLP down projections of the layers :func:`more_bits` picks. Measured on
SmolLM2-135M (``benchmarks/perplexity.py``), those few tensors carry most of
int4's loss of perplexity.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from itertools import groupby

import numpy as np
import onnx_ir as ir

from mobius.passes._fusion import CONCAT_OF
from mobius.passes._int4 import Int4Weight, int4_weight

logger = logging.getLogger("mobius")

MIXES = ("none", "sensitive")
# Checkpoint names of the attention value and MLP down projections, across families.
_SENSITIVE = re.compile(r"(?:^|\.)(?:v_proj|value|down_proj|fc2|w2|dense_4h_to_h)\.weight$")
_LAYER = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks)\.(\d+)\.")


def more_bits(layer: int, layers: int) -> bool:
    """Whether llama.cpp's mixes give ``layer`` of ``layers`` more bits.

    The first and last eighth of the layers, and every third layer between.
    """
    eighth = layers // 8
    return layer < eighth or layer >= 7 * layers // 8 or (layer - eighth) % 3 == 2


class Rounding:
    """Makes the lazy blocks of float weights: width, method, and the 8-bit mix."""

    def __init__(
        self,
        graph: ir.Graph,
        heads: set[ir.Node],
        *,
        block_size: int,
        symmetric: bool,
        bits: int = 4,
        method: str = "rtn",
        mix: str = "none",
    ) -> None:
        self.graph, self.heads = graph, heads
        self.block_size, self.symmetric = block_size, symmetric
        self.bits, self.method, self.mix = bits, method, mix
        self.counts: Counter[int] = Counter()  # weights (or packed parts) by width
        self._layers: int | None = None

    def weights(self, weight: ir.Value, rows_first: bool, packed_rank: int) -> list[Int4Weight]:
        """The blocks for ``weight``: one entry, or one per run of packed parts of one width."""
        runs = self._runs(weight, rows_first)
        if len(runs) == 1:
            self.counts[runs[0][0]] += len(runs[0][1])
            return [self._blocks(weight, rows_first, packed_rank, runs[0][0])]
        blocks = []
        for i, (bits, parts) in enumerate(runs):
            self.counts[bits] += len(parts)
            part = _packed_part(weight, parts, f"{weight.name}.part{i}")
            blocks.append(self._blocks(part, rows_first, packed_rank, bits))
        return blocks

    def log(self) -> None:
        """Say in the build log how many weights got which width and method."""
        if not self.counts:
            return
        widths = ", ".join(f"{n} at {b} bits" for b, n in sorted(self.counts.items()))
        logger.info("quantized weights: %s (%s, block %d)", widths, self.method, self.block_size)

    def _blocks(self, weight, rows_first, packed_rank, bits) -> Int4Weight:
        return int4_weight(
            self.graph,
            weight,
            rows_first=rows_first,
            block_size=self.block_size,
            symmetric=self.symmetric,
            packed_rank=packed_rank,
            bits=bits,
            method=self.method,
        )

    def _runs(self, weight: ir.Value, rows_first: bool) -> list[tuple[int, list[ir.Value]]]:
        """``(bits, parts)`` runs of ``weight``'s output features, in order."""
        if self.mix == "none" or self.bits == 8:
            return [(self.bits, [weight])]
        if any(use.node in self.heads for use in weight.uses()):
            return [(8, [weight])]
        concat = weight.meta.get(CONCAT_OF)
        if concat is None or rows_first or concat[1] != 1:
            return [(self._bits_of(weight.name), [weight])]
        runs = [(b, list(p)) for b, p in groupby(concat[0], key=lambda p: self._bits_of(p.name))]
        return [(runs[0][0], [weight])] if len(runs) == 1 else runs

    def _bits_of(self, name: str) -> int:
        layer = _LAYER.search(name)
        if _SENSITIVE.search(name) and layer and more_bits(int(layer.group(1)), self.layers):
            return 8
        return self.bits

    @property
    def layers(self) -> int:
        """The model's layer count: one more than the largest layer index in its weight names."""
        if self._layers is None:
            found = [_LAYER.search(name) for name in self.graph.initializers]
            for value in self.graph.initializers.values():  # packed weights' parts
                concat = value.meta.get(CONCAT_OF)
                found += [_LAYER.search(p.name) for p in concat[0]] if concat else []
            self._layers = 1 + max((int(m.group(1)) for m in found if m), default=-1)
        return self._layers


def _packed_part(weight: ir.Value, parts: list[ir.Value], name: str) -> ir.Value:
    """The columns of packed ``weight`` that ``parts`` (consecutive, ``[K, N_i]``) hold, lazily."""
    k = int(weight.shape[0])
    n = sum(int(p.shape[1]) for p in parts)
    if len(parts) == 1:
        tensor = parts[0].const_value  # keeps a checkpoint weight's row streaming
    else:

        def load() -> ir.Tensor:
            return ir.tensor(np.concatenate([p.const_value.numpy() for p in parts], axis=1))

        tensor = ir.LazyTensor(load, weight.dtype, ir.Shape([k, n]), name=name)
    return ir.Value(name=name, type=weight.type, shape=ir.Shape([k, n]), const_value=tensor)
