"""SAM's ViTDet tower (GOT-OCR 2.0's, :mod:`.got_ocr2`) run at more than one image size.

transformers' SAM encoder takes any size whose grid differs from its native one
(``image_size / patch_size``): the absolute position table is resized (bicubic with
antialiasing) to the grid, and the relative tables of the global-attention layers
(``2 * grid - 1`` rows) are resized (linear) to the new grid's offsets; windowed
layers keep their tables (their size is the window's). Both resizes are linear maps
of the parameters fixed by the two sizes, so each is a constant matrix here, computed
once in float32 as PyTorch computes its interpolation weights.

DeepSeek-OCR 2 feeds this tower a global view at the native size and local tiles at a
smaller one; a module's ``forward`` takes the grid it runs at.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius_vision.models.got_ocr2 import (
    GotOcr2VisionAttention,
    GotOcr2VisionConfig,
    GotOcr2VisionEncoder,
    GotOcr2VisionLayer,
    relative_rows,
)

F32 = np.float32


def _cubic(x: np.ndarray, a: float = -0.5) -> np.ndarray:
    """The cubic convolution kernel PyTorch's antialiased bicubic uses (``a = -0.5``)."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return np.where(x < 1, near, np.where(x < 2, far, 0.0)).astype(F32)


def bicubic_antialias_weights(size_in: int, size_out: int) -> np.ndarray:
    """``[size_out, size_in]``: ``interpolate(mode="bicubic", antialias=True)`` along one axis."""
    scale = F32(size_in) / F32(size_out)
    support = F32(2.0) * scale if scale >= 1 else F32(2.0)  # the kernel widened when shrinking
    inverse = F32(1.0) / scale if scale >= 1 else F32(1.0)
    weights = np.zeros((size_out, size_in), F32)
    for i in range(size_out):
        center = scale * (F32(i) + F32(0.5))
        first = max(int(center - support + F32(0.5)), 0)
        last = min(int(center + support + F32(0.5)), size_in)
        taps = _cubic((np.arange(first, last).astype(F32) - center + F32(0.5)) * inverse)
        weights[i, first:last] = taps / taps.sum(dtype=F32)
    return weights


def linear_weights(size_in: int, size_out: int) -> np.ndarray:
    """``[size_out, size_in]``: ``interpolate(mode="linear", align_corners=False)``."""
    scale = F32(size_in) / F32(size_out)
    weights = np.zeros((size_out, size_in), F32)
    for i in range(size_out):
        source = max(scale * (F32(i) + F32(0.5)) - F32(0.5), F32(0.0))
        low = min(int(source), size_in - 1)
        fraction = F32(source - F32(low))
        weights[i, low] += F32(1.0) - fraction
        weights[i, min(low + 1, size_in - 1)] += fraction
    return weights


def constant_like(op, array: np.ndarray, like: ir.Value) -> ir.Value:
    """``array`` as a constant of ``like``'s dtype (the parameters' dtype of the build)."""
    return op.Constant(value=ir.tensor(array.astype(like.dtype.numpy())))


@contextlib.contextmanager
def sizes_set(module, **sizes: int) -> Iterator[None]:
    """Within the block, ``module``'s size attributes (GOT's modules read ``grid``, ``size``)
    are ``sizes``: the graph is emitted for that grid; the module keeps its parameters."""
    native = {name: getattr(module, name) for name in sizes}
    for name, value in sizes.items():
        object.__setattr__(module, name, value)
    try:
        yield
    finally:
        for name, value in native.items():
            object.__setattr__(module, name, value)


class SamAnyGridAttention(GotOcr2VisionAttention):
    """GOT's attention over a ``size x size`` grid, its relative tables resized when ``size``
    (set by :class:`SamAnyGridLayer` for the call) is not the one they were made for."""

    def relative_logits(self, op, q):
        s, native = self.size, self.rel_pos_h.shape[0]
        rows = op.Constant(value=ir.tensor(relative_rows(s)))
        tables = [self.rel_pos_h, self.rel_pos_w]
        if 2 * s - 1 != native:
            resize = linear_weights(native, 2 * s - 1)
            tables = [op.MatMul(constant_like(op, resize, t), t) for t in tables]
        table_h, table_w = (op.Gather(t, rows, axis=0) for t in tables)
        grid_q = op.Reshape(q, op.Constant(value_ints=[-1, s, s, self.head_dim]))
        rel_h = op.Einsum(grid_q, table_h, equation="bhwc,hkc->bhwk")
        rel_w = op.Einsum(grid_q, table_w, equation="bhwc,wkc->bhwk")
        both = op.Add(op.Unsqueeze(rel_h, [4]), op.Unsqueeze(rel_w, [3]))
        return op.Reshape(both, op.Constant(value_ints=[-1, self.heads, s * s, s * s]))


class SamAnyGridLayer(GotOcr2VisionLayer):
    """GOT's layer at the grid given to :meth:`forward` (windows of ``window`` unless 0)."""

    def __init__(self, config: GotOcr2VisionConfig, window: int) -> None:
        super().__init__(config, window)
        self.attn = SamAnyGridAttention(config, window or config.grid)

    def forward(self, op, x, grid: int):
        # a global layer attends over the whole grid, a windowed one over its windows
        with sizes_set(self, grid=grid), sizes_set(self.attn, size=self.window or grid):
            return super().forward(op, x)


class SamAnyGridEncoder(GotOcr2VisionEncoder):
    """``pixel_values [b, c, grid * patch, grid * patch]`` to the neck's ``[b, channels, grid, grid]``."""

    def __init__(self, config: GotOcr2VisionConfig) -> None:
        super().__init__(config)
        self.layers = nn.ModuleList(
            [
                SamAnyGridLayer(
                    config, 0 if i in config.global_attn_indexes else config.window_size
                )
                for i in range(config.num_hidden_layers)
            ]
        )
        self.native_grid = config.grid

    def forward(self, op, pixel_values, grid: int):
        native = self.native_grid
        x = self.patch_embed(op, pixel_values)  # [b, grid, grid, dim]
        if self.pos_embed is not None:
            table = self.pos_embed
            if grid != native:
                resize = constant_like(op, bicubic_antialias_weights(native, grid), table)
                table = op.Einsum(resize, table, resize, equation="ij,bjkd,lk->bild")
            x = op.Add(x, table)
        # every size spelt out: a batch of no images (no tiles) reshapes too
        x = op.Reshape(x, op.Constant(value_ints=[-1, grid * grid, self.dim]))
        for layer in self.layers:
            x = layer(op, x, grid)
        with sizes_set(self.neck, grid=grid):
            return self.neck(op, x)
