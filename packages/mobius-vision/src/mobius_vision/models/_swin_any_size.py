"""Swin's backbone for any image size: the graph reads the height and width of ``pixel_values``
and pads, windows, masks and merges from them, as transformers' ``SwinBackbone`` does in
PyTorch for whatever size it is given (MaskFormer's processor resizes each image by its
shortest edge, so a universal-segmentation graph takes any size).

The module tree and the checkpoint keys are :class:`~.swin.SwinBackbone`'s; what changes is
the layout between the modules: a map stays ``[batch, h, w, C]`` from the patch embeddings to
the stage norms (the LayerNorms and MLPs read the last axis), so each step takes its sizes
from the map itself. Windows are always full (``always_partition``: a stage smaller than the
window is padded to it and odd blocks keep their shift), and the shift mask is computed in
the graph from the padded size. Absolute position embeddings are refused: transformers adds
its table only at the size it was made for.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, bidirectional_attention
from mobius.errors import ConfigError
from mobius_vision.models._backbone_config import stage_names
from mobius_vision.models._conv import Conv2d
from mobius_vision.models.swin import (
    SwinAttention,
    SwinBackbone,
    SwinBackboneConfig,
    SwinLayer,
    SwinPatchMerging,
    SwinSelfAttention,
    SwinStageBeforeMerging,
    SwinStagesEncoder,
)

#: The end of a slice that runs to the end of its axis.
TO_THE_END = np.iinfo(np.int64).max
#: What transformers adds to the scores between tokens of different regions of a shifted map.
MASKED = -100.0


def pad_to_multiple(op, x, multiple: int, axes: tuple[int, int]):
    """Rank-4 ``x`` zero-padded at the end of ``axes`` up to a multiple of ``multiple``."""
    m = op.Constant(value_ints=[multiple])
    extra = op.Mod(op.Sub(m, op.Mod(op.Shape(x), m)), m)  # [4]: the padding of every axis
    chosen = op.Constant(value_ints=[int(axis in axes) for axis in range(4)])
    return op.Pad(x, op.Concat(op.Constant(value_ints=[0] * 4), op.Mul(extra, chosen), axis=0))


def roll(op, x, shift: int):
    """``torch.roll(x, (shift, shift), dims=(1, 2))`` of ``[batch, h, w, C]``, sides > |shift|."""
    if not shift:
        return x
    for axis in (1, 2):  # the last `shift` entries move to the front (the first, if negative)
        front = op.Slice(x, [-shift], [TO_THE_END], [axis])
        x = op.Concat(front, op.Slice(x, [0], [-shift], [axis]), axis=axis)
    return x


def partition(op, x, window: int, channels: int):
    """``[batch, hp, wp, C]`` (sides multiples of ``window``) -> ``[batch * windows, N, C]``,
    the windows row by row as transformers' ``window_partition``; ``0`` in a shape copies."""
    x = op.Reshape(x, op.Constant(value_ints=[-1, window, 0, channels]))  # [b*rows, ws, wp, C]
    x = op.Reshape(x, op.Constant(value_ints=[0, 0, -1, window, channels]))
    x = op.Transpose(x, perm=[0, 2, 1, 3, 4])  # [b*rows, cols, ws, ws, C]
    return op.Reshape(x, op.Constant(value_ints=[-1, window * window, channels]))


def unpartition(op, windows, like, window: int, channels: int):
    """The inverse of :func:`partition`: back to the shape of ``like`` ``[batch, hp, wp, C]``."""
    cols = op.Div(op.Shape(like, start=2, end=3), op.Constant(value_ints=[window]))
    size = op.Concat(op.Constant(value_ints=[-1]), cols, [window, window, channels], axis=0)
    x = op.Transpose(op.Reshape(windows, size), perm=[0, 2, 1, 3, 4])  # [b*rows, ws, cols, ws, C]
    return op.Reshape(x, op.Shape(like))


def shift_mask(op, padded, window: int, shift: int, like):
    """``[windows, 1, N, N]`` in the dtype of ``like``: :data:`MASKED` between tokens of
    different regions of the rolled ``[batch, hp, wp, C]`` map (transformers'
    ``get_attn_mask``), 0 elsewhere."""

    def regions(side):  # [n] int64: 0, then 1 in the last window, 2 in the last shift
        n = op.Squeeze(side)
        index = op.Range(op.Constant(value_int=0), n, op.Constant(value_int=1))
        ends = [op.Sub(n, op.Constant(value_int=k)) for k in (window, shift)]
        marks = [op.Cast(op.GreaterOrEqual(index, end), to=ir.DataType.INT64) for end in ends]
        return op.Add(*marks)

    rows = regions(op.Shape(padded, start=1, end=2))
    cols = regions(op.Shape(padded, start=2, end=3))
    three = op.Constant(value_int=3)
    image = op.Add(op.Mul(op.Unsqueeze(rows, [1]), three), op.Unsqueeze(cols, [0]))
    windows = op.Reshape(partition(op, op.Unsqueeze(image, [0, 3]), window, 1), [0, -1])
    differ = op.Not(op.Equal(op.Unsqueeze(windows, [1]), op.Unsqueeze(windows, [2])))
    masked = op.CastLike(op.Constant(value_float=MASKED), like)
    zero = op.CastLike(op.Constant(value_float=0.0), like)
    return op.Unsqueeze(op.Where(differ, masked, zero), [1])


class AnySizeSwinSelfAttention(SwinSelfAttention):
    """Window attention whose shift mask comes with the windows (it depends on the size)."""

    def __init__(self, config, stage: int, window: int, mask) -> None:
        super().__init__(config, stage, window, None)  # the layer's static mask is unused

    def forward(self, op, x, mask=None):  # [batch * windows, N, C]
        q, k, v = self.query(op, x), self.key(op, x), self.value(op, x)
        bias = op.Unsqueeze(self.position_bias(op), [0])  # [1, heads, N, N]
        if mask is not None:
            bias = op.Add(bias, mask)  # [windows, heads, N, N]
            # x holds the windows of every image, the window index fastest.
            images = op.Div(op.Shape(x, start=0, end=1), op.Shape(mask, start=0, end=1))
            bias = op.Tile(bias, op.Concat(images, op.Constant(value_ints=[1, 1, 1]), axis=0))
        return bidirectional_attention(op, q, k, v, bias, self.heads, self.scale)


class AnySizeSwinAttention(SwinAttention):
    self_attention_class = AnySizeSwinSelfAttention

    def forward(self, op, x, mask=None):
        return self.output(op, self.self(op, x, mask))


class AnySizeSwinLayer(SwinLayer):
    """A block over ``[batch, h, w, C]``: the map padded to whole windows, rolled, windowed."""

    attention_class = AnySizeSwinAttention

    def windowed(self, op, x):
        ws, shift, c = self.window, self.shift, self.dim
        padded = pad_to_multiple(op, x, ws, axes=(1, 2))
        windows = partition(op, roll(op, padded, -shift), ws, c)
        mask = shift_mask(op, padded, ws, shift, like=x) if shift else None
        out = unpartition(op, self.attention(op, windows, mask), padded, ws, c)
        out = roll(op, out, shift)
        return op.Slice(out, [0, 0], op.Shape(x, start=1, end=3), [1, 2])  # the padding cut


class AnySizeSwinPatchMerging(SwinPatchMerging):
    """Each 2x2 block of ``[batch, h, w, C]`` (odd sides padded) as ``[batch, h/2, w/2, 4C]``."""

    def merge(self, op, x):
        c = self.dim
        x = pad_to_multiple(op, x, 2, axes=(1, 2))
        half = op.Div(op.Shape(x, start=1, end=3), op.Constant(value_ints=[2]))
        size = op.Concat(op.Shape(x, start=0, end=1), half, [4 * c], axis=0)
        x = op.Reshape(x, op.Constant(value_ints=[-1, 2, 0, c]))  # [b*h/2, row, w, C]
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, -1, 2, c]))  # [b*h/2, row, w/2, col, C]
        # channel blocks in torch's order x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2], x[1::2, 1::2]
        x = op.Transpose(x, perm=[0, 2, 3, 1, 4])  # [b*h/2, w/2, col, row, C]
        return op.Reshape(x, size)


class AnySizeSwinStage(SwinStageBeforeMerging):
    layer_class = AnySizeSwinLayer
    merging_class = AnySizeSwinPatchMerging


class AnySizeSwinStagesEncoder(SwinStagesEncoder):
    stage_class = AnySizeSwinStage


class AnySizeSwinPatchEmbeddings(nn.Module):
    """``Conv2d(kernel=stride=patch)`` on the image padded bottom/right to a multiple of the
    patch: ``[batch, h, w, C]``."""

    def __init__(self, config: SwinBackboneConfig) -> None:
        super().__init__()
        self.patch_size = config.patch_size
        self.projection = Conv2d(
            config.num_channels, config.embed_dim, config.patch_size, stride=config.patch_size
        )

    def forward(self, op, pixel_values):
        x = pad_to_multiple(op, pixel_values, self.patch_size, axes=(2, 3))
        return op.Transpose(self.projection(op, x), perm=[0, 2, 3, 1])


class AnySizeSwinEmbeddings(nn.Module):
    """The patch embeddings and their LayerNorm (torch's default eps); no absolute table."""

    def __init__(self, config: SwinBackboneConfig) -> None:
        super().__init__()
        if config.use_absolute_embeddings:
            raise ConfigError(
                f"{config.model_type}: use_absolute_embeddings is refused under a head that "
                "takes any image size: transformers adds the table only at its own size"
            )
        self.patch_embeddings = AnySizeSwinPatchEmbeddings(config)
        self.norm = LayerNorm(config.embed_dim)

    def forward(self, op, pixel_values):
        return self.norm(op, self.patch_embeddings(op, pixel_values))  # [batch, h, w, C]


def channels_first(op, maps: list) -> list:
    """``[batch, h, w, C]`` maps as ``[batch, C, h, w]``."""
    return [op.Transpose(x, perm=[0, 3, 1, 2]) for x in maps]


class AnySizeSwinBackbone(SwinBackbone):
    """transformers' ``SwinBackbone`` at any image size: ``feature_maps`` ``[batch, C, h, w]``."""

    embeddings_class = AnySizeSwinEmbeddings
    encoder_class = AnySizeSwinStagesEncoder

    def forward(self, op, pixel_values) -> list:
        x = self.embeddings(op, pixel_values)  # [batch, h, w, C]
        names = stage_names(len(self.config.depths))
        maps = dict(zip(names, [x, *self.encoder(op, x)], strict=True))
        chosen = {name: maps[name] for name in self.config.out_features}
        return channels_first(op, self.hidden_states_norms(op, chosen))
