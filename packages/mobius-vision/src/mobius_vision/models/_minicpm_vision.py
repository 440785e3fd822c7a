"""MiniCPM-V 4.6's vision tower (MiniCPM-OCR's and MiniCPM-V 4.7's too): SigLIP's layers over
NaViT-packed slices, with a window-attention merger between them.

The processor packs every slice of every image into one row of patches
(``pixel_values [1, channels, patch, patches * patch]``), each slice's ``h x w``
patches row-major, and gives the grids as ``target_sizes [slices, 2]``. The tower:

- embeds the patches and adds the learned ``position_embedding``, each slice's rows and
  columns bucketized onto the ``side x side`` table as NaViT does (``i / h`` against
  ``arange(1/side, 1, 1/side)``);
- runs CLIP/SigLIP pre-norm layers (``layer_norm1``, ``self_attn``, ``layer_norm2``,
  ``mlp``), attention within each slice;
- after layer ``insert_layer_id`` (when the family merges 16x), ``vit_merger``: each
  slice's 2x2 windows, window by window, attend within themselves, then each window's
  four patches, concatenated, go through ``pre_norm``, ``linear_1``, GELU (tanh),
  ``linear_2``, plus their mean: the slice's grid halves on each side;
- ends with ``post_layernorm``.

Every reordering is a gather by :func:`window_order`, computed in the graph from
``target_sizes``; the processor makes every slice's sides multiples of the merges.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation, module_scope
from mobius.errors import ConfigError
from mobius_text.models.clip_text import CLIPAttention
from mobius_vision.models.clip_vision import CLIPEncoder
from mobius_vision.models.idefics3_vision import (
    Idefics3VisionConfig,
    Idefics3VisionEmbeddings,
    torch_arange_boundaries,
)
from mobius_vision.models.qwen2_vl import same_group

INT64 = ir.DataType.INT64
#: Windows and merges are 2x2: transformers halves the slice grids by that hard-coded.
KERNEL = 2


@dataclass
class MiniCPMVisionConfig(Idefics3VisionConfig):
    """Idefics3's tower settings (SigLIP's layers, a square position table) and where the
    window merger goes."""

    insert_layer_id: int = 6

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if list(hf_config.window_kernel_size) != [KERNEL, KERNEL]:
            raise ConfigError(
                f"{hf_config.model_type}: window_kernel_size {hf_config.window_kernel_size!r} "
                "is not (2, 2), the halving transformers applies after the merger"
            )
        fields = super().hf_fields(hf_config)
        return dict(fields, insert_layer_id=int(hf_config.insert_layer_id))


def packed_layout(op, sizes):
    """Per token of slices packed one after another (``sizes [slices, 2]`` int64, each slice's
    ``h x w`` tokens row-major): ``(slice, local index, first token, height, width)`` ``[tokens]``."""
    heights = op.Squeeze(op.Slice(sizes, [0], [1], [1]), [1])
    widths = op.Squeeze(op.Slice(sizes, [1], [2], [1]), [1])
    counts = op.Mul(heights, widths)
    ends = op.CumSum(counts, op.Constant(value_int=0))
    total = op.ReduceSum(counts, keepdims=0)
    index = op.Range(op.Constant(value_int=0), total, op.Constant(value_int=1))
    after = op.GreaterOrEqual(op.Unsqueeze(index, [1]), op.Unsqueeze(ends, [0]))
    slice_ = op.ReduceSum(op.Cast(after, to=INT64), [1], keepdims=0)
    first = op.Gather(op.Sub(ends, counts), slice_)
    local = op.Sub(index, first)
    return slice_, local, first, op.Gather(heights, slice_), op.Gather(widths, slice_)


def window_order(op, sizes):
    """Gather indices ``[tokens]``: each slice's 2x2 windows one after another, row-major, each
    window's four tokens row-major (transformers' window index over whole windows)."""
    k = op.Constant(value_int=KERNEL)
    kk = op.Constant(value_int=KERNEL * KERNEL)
    _, local, first, _, width = packed_layout(op, sizes)
    window, inner = op.Div(local, kk), op.Mod(local, kk)
    windows_wide = op.Div(width, k)
    row = op.Add(op.Mul(op.Div(window, windows_wide), k), op.Div(inner, k))
    col = op.Add(op.Mul(op.Mod(window, windows_wide), k), op.Mod(inner, k))
    return op.Add(first, op.Add(op.Mul(row, width), col))


class MiniCPMVisionEmbeddings(Idefics3VisionEmbeddings):
    """Idefics3's patches and position table; positions per packed slice, not per tile."""

    def position_ids(self, op, sizes):
        """``[tokens]``: ``bucket(row / h) * side + bucket(col / w)`` per slice."""
        _, local, _, height, width = packed_layout(op, sizes)
        boundaries = op.Constant(value=ir.tensor(torch_arange_boundaries(self.side)))

        def bucket(index, length):  # bucketize(index / length, boundaries, right=True)
            ratio = op.Div(
                op.Cast(index, to=ir.DataType.FLOAT), op.Cast(length, to=ir.DataType.FLOAT)
            )
            below = op.LessOrEqual(boundaries, op.Unsqueeze(ratio, [1]))
            return op.ReduceSum(op.Cast(below, to=INT64), [1], keepdims=0)

        rows = bucket(op.Div(local, width), height)
        cols = bucket(op.Mod(local, width), width)
        return op.Add(op.Mul(rows, op.Constant(value_int=self.side)), cols)

    def forward(self, op, pixel_values, sizes):
        patches = self.patch_embedding(op, pixel_values)  # [1, tokens, hidden]
        return op.Add(patches, self.position_embedding(op, self.position_ids(op, sizes)))


class MiniCPMWindowMerger(nn.Module):
    """``vit_merger``: 2x2 window attention, then each window to one token (module docstring)."""

    def __init__(self, config: MiniCPMVisionConfig) -> None:
        super().__init__()
        d, eps, window = config.hidden_size, config.layer_norm_eps, KERNEL * KERNEL
        self.self_attn = CLIPAttention(d, config.num_attention_heads)
        self.layer_norm1 = LayerNorm(d, eps)
        self.pre_norm = LayerNorm(d * window, eps)
        self.linear_1 = Linear(d * window, config.intermediate_size * window, bias=True)
        self.act = get_activation("gelu_pytorch_tanh")
        self.linear_2 = Linear(config.intermediate_size * window, d, bias=True)
        self.width = d

    def forward(self, op, x, sizes):
        order = window_order(op, sizes)
        count = op.Squeeze(op.Shape(order), [0])
        position = op.Range(op.Constant(value_int=0), count, op.Constant(value_int=1))
        window = op.Div(position, op.Constant(value_int=KERNEL * KERNEL))  # windows are whole
        windowed = op.Gather(self.layer_norm1(op, x), order, axis=1)
        attended = self.self_attn(op, windowed, same_group(op, window))
        x = op.Add(op.Gather(x, order, axis=1), attended)  # [1, tokens, d]
        patches = op.Reshape(x, op.Constant(value_ints=[-1, KERNEL * KERNEL, self.width]))
        mean = op.ReduceMean(patches, [1], keepdims=0)
        flat = op.Reshape(x, op.Constant(value_ints=[-1, KERNEL * KERNEL * self.width]))
        y = self.linear_2(op, self.act(op, self.linear_1(op, self.pre_norm(op, flat))))
        return op.Unsqueeze(op.Add(y, mean), [0])  # [1, tokens / 4, d]


class MiniCPMVisionTower(nn.Module):
    """HF ``MiniCPMV4_6VisionModel``: ``(last_hidden_state [1, tokens, d], sizes)``, the sizes
    halved where the window merger ran (``use_merger``)."""

    def __init__(self, config: MiniCPMVisionConfig, use_merger: bool) -> None:
        super().__init__()
        self.config, self.use_merger = config, use_merger
        self.embeddings = MiniCPMVisionEmbeddings(config)
        self.encoder = CLIPEncoder(config)
        self.post_layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.vit_merger = MiniCPMWindowMerger(config) if use_merger else None

    def forward(self, op, pixel_values, sizes):
        x = self.embeddings(op, pixel_values, sizes)
        within_slices = same_group(op, packed_layout(op, sizes)[0])
        for i, layer in enumerate(self.encoder.layers):
            with module_scope(op, self.encoder):
                x = layer(op, x, within_slices)
            if self.use_merger and i == self.config.insert_layer_id:
                x = self.vit_merger(op, x, sizes)
                sizes = op.Div(sizes, op.Constant(value_int=KERNEL))
                within_slices = same_group(op, packed_layout(op, sizes)[0])
        return self.post_layernorm(op, x), sizes
