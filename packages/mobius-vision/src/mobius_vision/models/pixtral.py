"""Pixtral's vision tower: a bias-free patch conv, ``ln_pre``, and pre-RMSNorm layers with 2-D
rotary attention over each image's patch grid and a gated MLP.

Images of any size go through one graph: the patches of every image (its ``image_sizes``
``[height, width]`` in pixels, the rest of the padded batch dropped) are packed into one
sequence ``[1, patches, hidden]``, and a block mask keeps each image's attention within
its own patches, as transformers does. Without ``image_sizes`` every image fills its
tensor. The rotary angles are ``row * f[0::2]`` and ``column * f[1::2]`` of the usual
inverse frequencies, laid out rotate-half over the whole head. The checkpoint's keys
(``patch_conv``, ``ln_pre``, ``transformer.layers.{i}.attention...``) name the modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import GatedMLP, Linear, RMSNorm, apply_rotary, merge_heads
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_vision.config import VisionConfig
from mobius_vision.models.vit import PatchConv

_EPS = 1e-5  # transformers fixes every Pixtral RMSNorm's epsilon


@dataclass
class PixtralVisionConfig(VisionConfig):
    hidden_size: int = 1024
    intermediate_size: int = 4096
    num_hidden_layers: int = 24
    num_attention_heads: int = 16
    patch_size: int = 16
    hidden_act: str = "gelu"
    rope_theta: float = 10000.0

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        patch = hf_config.patch_size
        if isinstance(patch, (list, tuple)):
            if len(set(patch)) != 1:
                raise ConfigError(f"patch_size {patch!r}: Pixtral's patches are square")
            patch = patch[0]
        rope = hf_config.rope_parameters or {}
        if rope.get("rope_type", "axial") != "axial":
            raise ConfigError(f"Pixtral's rope_type is axial, not {rope['rope_type']!r}")
        return dict(
            super().hf_fields(hf_config),
            hidden_size=hf_config.hidden_size,
            intermediate_size=hf_config.intermediate_size,
            num_hidden_layers=hf_config.num_hidden_layers,
            num_attention_heads=hf_config.num_attention_heads,
            patch_size=int(patch),
            hidden_act=hf_config.hidden_act,
            rope_theta=float(rope.get("rope_theta", 10000.0)),
        )

    @property
    def head_dim(self) -> int:
        return (
            self.hidden_size // self.num_attention_heads
        )  # transformers' attention ignores head_dim


def _scalars(op, pair):
    """The two entries of a ``[2]`` int64 tensor, as scalars."""
    return (op.Squeeze(op.Slice(pair, [i], [i + 1]), [0]) for i in (0, 1))


def grid_cells(op, counts, grid):
    """``(image, row, column)`` ``[cells]`` of each image's ``counts [images, 2]`` grid, row-major.

    ``grid [2]`` is the largest grid (the padded tensor's); the cells come image by
    image, each image's rows in order, as transformers flattens them.
    """
    rows, cols = (
        op.Range(op.Constant(value_int=0), n, op.Constant(value_int=1)) for n in _scalars(op, grid)
    )
    height = op.Unsqueeze(op.Slice(counts, [0], [1], [1]), [2])  # [images, 1, 1]
    width = op.Unsqueeze(op.Slice(counts, [1], [2], [1]), [2])
    in_rows = op.Less(op.Unsqueeze(rows, [0, 2]), height)  # [images, rows, 1]
    in_cols = op.Less(op.Unsqueeze(cols, [0, 1]), width)  # [images, 1, cols]
    cells = op.NonZero(op.And(in_rows, in_cols))  # [3, cells]
    return tuple(op.Squeeze(c, [0]) for c in op.Split(cells, num_outputs=3, axis=0, _outputs=3))


class PixtralRotary(nn.Module):
    """cos/sin ``[1, patches, head_dim/2]`` from each patch's row and column."""

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        exponents = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
        inv_freq = (1.0 / (np.float32(theta) ** exponents)).astype(np.float32)
        self.row_freq, self.col_freq = inv_freq[0::2], inv_freq[1::2]

    def forward(self, op, row, col):
        def angles(position, freq):  # [patches, head_dim/4]
            position = op.Unsqueeze(op.Cast(position, to=ir.DataType.FLOAT), [1])
            return op.Mul(position, op.Constant(value=ir.tensor(freq)))

        freqs = op.Concat(angles(row, self.row_freq), angles(col, self.col_freq), axis=-1)
        freqs = op.Unsqueeze(freqs, [0])
        return op.Cos(freqs), op.Sin(freqs)


class PixtralAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.q_proj = Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = Linear(hidden_size, hidden_size, bias=False)
        self.num_heads, self.head_dim = num_heads, hidden_size // num_heads

    def forward(self, op, x, cos, sin, bias):
        shape = op.Constant(value_ints=[0, 0, self.num_heads, self.head_dim])

        def heads(proj):  # [1, heads, patches, head_dim]
            return op.Transpose(op.Reshape(proj(op, x), shape), perm=[0, 2, 1, 3])

        q = apply_rotary(op, heads(self.q_proj), cos, sin, self.head_dim)
        k = apply_rotary(op, heads(self.k_proj), cos, sin, self.head_dim)
        y = op.Attention(q, k, heads(self.v_proj), bias, scale=self.head_dim**-0.5)
        y = merge_heads(op, y)
        return self.o_proj(op, y)


class PixtralAttentionLayer(nn.Module):
    """Pre-norm: ``x + attention(attention_norm(x))``, ``x + feed_forward(ffn_norm(x))``."""

    def __init__(self, config: PixtralVisionConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.attention_norm = RMSNorm(d, _EPS)
        self.attention = PixtralAttention(d, config.num_attention_heads)
        self.ffn_norm = RMSNorm(d, _EPS)
        self.feed_forward = GatedMLP(d, config.intermediate_size, config.hidden_act)

    def forward(self, op, x, cos, sin, bias):
        x = op.Add(x, self.attention(op, self.attention_norm(op, x), cos, sin, bias))
        return op.Add(x, self.feed_forward(op, self.ffn_norm(op, x)))


class PixtralTransformer(nn.Module):
    def __init__(self, config: PixtralVisionConfig) -> None:
        super().__init__()
        layers = [PixtralAttentionLayer(config) for _ in range(config.num_hidden_layers)]
        self.layers = nn.ModuleList(layers)

    def forward(self, op, x, cos, sin, bias, num_layers: int | None = None) -> list:
        """``[x, layer_1(x), ...]``: the input and each layer's output (the first ``num_layers``)."""
        states = [x]
        for layer in self.layers[:num_layers]:
            states.append(layer(op, states[-1], cos, sin, bias))
        return states


class PixtralTower(Model):
    """The tower (HF ``PixtralVisionModel``): ``patch_conv``, ``ln_pre``, ``transformer``."""

    def __init__(self, config: PixtralVisionConfig) -> None:
        super().__init__()
        d, p = config.hidden_size, config.patch_size
        self.patch_conv = PatchConv(config.num_channels, d, p, bias=False)
        self.ln_pre = RMSNorm(d, _EPS)
        self.transformer = PixtralTransformer(config)
        self.rotary = PixtralRotary(config.head_dim, config.rope_theta)
        self.patch_size, self.hidden_size = p, d

    def patch_counts(self, op, pixel_values, image_sizes=None):
        """``(counts [images, 2], grid [2])``: each image's patch rows and columns, and the tensor's."""
        size = op.Shape(pixel_values, start=2, end=4)  # [height, width] of the padded tensor
        grid = op.Div(size, op.Constant(value_int=self.patch_size))  # the conv's output grid
        if image_sizes is None:  # every image fills its tensor
            count = op.Shape(pixel_values, start=0, end=1)
            image_sizes = op.Expand(
                op.Unsqueeze(size, [0]), op.Concat(count, op.Constant(value_ints=[2]), axis=0)
            )
        # transformers slices each image's grid off the conv output (a slice stops at its end)
        counts = op.Min(op.Div(image_sizes, op.Constant(value_int=self.patch_size)), grid)
        return counts, grid

    def hidden_states(self, op, pixel_values, num_layers=None, image_sizes=None) -> list:
        """transformers' ``hidden_states``: ``[1, patches, hidden]`` after ``ln_pre``, then each layer's.

        ``num_layers`` stops after that many layers (a vision–language model reads an
        inner layer and need not run the rest).
        """
        counts, grid = self.patch_counts(op, pixel_values, image_sizes)
        image, row, col = grid_cells(op, counts, grid)
        rows, cols = _scalars(op, grid)
        cell = op.Add(op.Mul(op.Add(op.Mul(image, rows), row), cols), col)  # in the padded grids
        patches = self.patch_conv(op, pixel_values)  # [images, rows * cols, hidden]
        flat = op.Reshape(patches, op.Constant(value_ints=[-1, self.hidden_size]))
        x = op.Unsqueeze(op.Gather(flat, cell, axis=0), [0])  # [1, patches, hidden]: the real ones
        x = self.ln_pre(op, x)
        cos, sin = self.rotary(op, row, col)
        # a patch attends to its own image's patches only
        same_image = op.Equal(op.Unsqueeze(image, [1]), op.Unsqueeze(image, [0]))
        bias = op.Unsqueeze(same_image, [0, 1])  # [1, 1, patches, patches], True: attend
        return self.transformer(op, x, cos, sin, bias, num_layers)


class PixtralVisionModel(PixtralTower):
    """The bare tower as a build: ``last_hidden_state [1, patches, hidden]`` over the batch's images."""

    config_class = PixtralVisionConfig
    task = "image-classification"
    tower_class = PixtralTower

    def __init__(self, config: PixtralVisionConfig) -> None:
        config.require_no_head()
        super().__init__(config)
        self.config = config

    def output_shapes(self) -> dict[str, list]:
        return {"last_hidden_state": [1, "patches", self.config.hidden_size]}

    def forward(self, op, pixel_values):
        return {"last_hidden_state": self.hidden_states(op, pixel_values)[-1]}


MODEL_TYPES = {"pixtral": PixtralVisionModel}
