"""Idefics3's vision tower: SigLIP's layers over image tiles, real patches' positions bucketized.

Each tile's real patches (its ``patch_mask``) are spread over the learned
``num_patches_per_side ** 2`` position table as transformers does: a real patch
row ``i`` of ``n`` falls in bucket ``bucketize(i / n, arange(1/N, 1, 1/N))``
(NaViT's fractional coordinates); padded patches take position 0 and are masked
out as attention keys. ``post_layernorm`` ends the tower. The registered
``idefics3_vision`` model (transformers' ``Idefics3VisionTransformer``) takes whole
tiles (every patch real) and returns ``last_hidden_state``; its checkpoints carry
no ``vision_model.`` prefix, which is added.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, LayerNorm, lowest_value
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig
from mobius_vision.models._common import VisionTowerModel
from mobius_vision.models.clip_vision import CLIPEncoder
from mobius_vision.models.vit import PatchConv

# torch.clamp(coords, max=1 - 1e-6) in float32
_BELOW_ONE = np.array(1.0 - 1e-6, np.float32)


@dataclass
class Idefics3VisionConfig(VisionConfig):
    hidden_size: int = 1152
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 16
    patch_size: int = 32
    hidden_act: str = "gelu_pytorch_tanh"
    layer_norm_eps: float = 1e-6

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        patch = hf_config.patch_size
        height, width = fields["image_size"]
        if not isinstance(patch, int) or height != width:
            raise ConfigError(
                f"patch_size {patch!r}, image_size {hf_config.image_size!r}: Idefics3's tower "
                "takes square images and square patches (one int each)"
            )
        return dict(
            fields,
            hidden_size=hf_config.hidden_size,
            intermediate_size=hf_config.intermediate_size,
            num_hidden_layers=hf_config.num_hidden_layers,
            num_attention_heads=hf_config.num_attention_heads,
            patch_size=patch,
            hidden_act=hf_config.hidden_act,
            layer_norm_eps=hf_config.layer_norm_eps,
        )

    @property
    def patches_per_side(self) -> int:
        return self.image_size[0] // self.patch_size


def torch_arange_boundaries(n: int) -> np.ndarray:
    """``torch.arange(1/n, 1.0, 1/n)`` (float32) exactly as PyTorch computes it on the CPU.

    Its values sit within an ulp of ``k/n``, just where the fractional coordinates
    fall, so the buckets depend on their rounding: PyTorch fills 16 values at a time
    from a float32 base plus ``k * step`` in float64 (8-lane vectors), the rest as
    ``start + step * i`` in float64.
    """
    start = step = 1.0 / n
    length = int(np.ceil((1.0 - start) / step))
    out = np.empty(length, np.float32)
    lanes, i = 8, 0
    while i <= length - 2 * lanes:
        for base_index in (i, i + lanes):
            base = np.float64(np.float32(start + step * base_index))
            out[base_index : base_index + lanes] = base + np.arange(lanes) * step
        i += 2 * lanes
    out[i:] = start + step * np.arange(i, length)
    return out


class Idefics3VisionEmbeddings(nn.Module):
    """``patch_embedding(pixels) + position_embedding(bucketized positions)``."""

    def __init__(self, config: Idefics3VisionConfig) -> None:
        super().__init__()
        d, side = config.hidden_size, config.patches_per_side
        self.patch_embedding = PatchConv(config.num_channels, d, config.patch_size)
        self.position_embedding = Embedding(side * side, d)
        self.side = side  # the input's patch grid is side x side too

    def position_ids(self, op, patch_mask):
        """``[tiles, patches]`` int64: each real patch's bucket, 0 for padding patches."""
        side = self.side

        def count(axis):  # [tiles]: the real patch rows (axis 2) or columns (axis 1)
            line = op.Gather(patch_mask, op.Constant(value_int=0), axis=axis)
            return op.ReduceSum(op.Cast(line, to=ir.DataType.INT64), [1], keepdims=0)

        boundaries = op.Constant(value=ir.tensor(torch_arange_boundaries(side)))

        def buckets(n, real):  # [tiles, n]: bucketize(index / real, boundaries, right=True)
            step = op.Div(op.Constant(value_float=1.0), op.Cast(real, to=ir.DataType.FLOAT))
            index = op.Constant(value=ir.tensor(np.arange(n, dtype=np.float32)))
            below_one = op.Constant(value=ir.tensor(_BELOW_ONE))
            coords = op.Min(op.Mul(index, op.Unsqueeze(step, [1])), below_one)
            below = op.LessOrEqual(boundaries, op.Unsqueeze(coords, [2]))  # [tiles, n, N-1]
            return op.ReduceSum(op.Cast(below, to=ir.DataType.INT64), [2], keepdims=0)

        h = buckets(side, count(2))  # patch_mask[:, :, 0].sum(1)
        w = buckets(side, count(1))  # patch_mask[:, 0, :].sum(1)
        width = op.Constant(value=ir.tensor(np.array(side, np.int64)))
        ids = op.Add(op.Mul(op.Unsqueeze(h, [2]), width), op.Unsqueeze(w, [1]))
        flat = op.Constant(value_ints=[0, side * side])
        zero = op.Constant(value=ir.tensor(np.array(0, np.int64)))
        return op.Where(op.Reshape(patch_mask, flat), op.Reshape(ids, flat), zero)

    def forward(self, op, pixel_values, patch_mask):
        positions = self.position_embedding(op, self.position_ids(op, patch_mask))
        return op.Add(self.patch_embedding(op, pixel_values), positions)


def key_bias(op, patch_mask, x):
    """Additive ``[tiles, 1, patches, patches]``: 0 for real keys, half the lowest value for pads.

    transformers adds the lowest value to the scores; ONNX Runtime reads exactly that
    value as "no key" and gives a tile with no real patch (SmolVLM keeps one when
    every tile is padding) zeros, where transformers' softmax spreads evenly over
    the pads. Half of it is absorbed by the scores the same way and keeps that.
    """
    keys = op.Unsqueeze(op.Reshape(patch_mask, op.Constant(value_ints=[0, -1])), [1, 2])
    zero = op.CastLike(op.Constant(value_float=0.0), x)
    pad = op.CastLike(op.Constant(value_float=lowest_value(x.dtype) / 2), x)
    rows = op.Shape(x, start=1, end=2)
    return op.Expand(op.Where(keys, zero, pad), op.Concat([1, 1], rows, [1], axis=0))


class Idefics3VisionTransformer(nn.Module):
    """The tower: embeddings, SigLIP's encoder (padding patches masked as keys), ``post_layernorm``.

    ``pixel_values [tiles, channels, size, size]``, ``patch_mask`` bool ``[tiles, size/p,
    size/p]`` (every patch real when not given) -> ``[tiles, patches, hidden]``.
    """

    def __init__(self, config: Idefics3VisionConfig) -> None:
        super().__init__()
        self.embeddings = Idefics3VisionEmbeddings(config)
        self.encoder = CLIPEncoder(config)
        self.post_layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def hidden_states(self, op, pixel_values, num_layers=None, patch_mask=None) -> list:
        """transformers' ``hidden_states``: the embeddings, then each layer's output."""
        if patch_mask is None:
            shape = op.Concat(
                op.Shape(pixel_values, start=0, end=1),
                op.Constant(value_ints=[self.embeddings.side] * 2),
                axis=0,
            )
            patch_mask = op.Expand(op.Constant(value=ir.tensor(np.array(True))), shape)
        x = self.embeddings(op, pixel_values, patch_mask)  # [tiles, patches, hidden]
        return self.encoder(op, x, key_bias(op, patch_mask, x), num_layers)

    def forward(self, op, pixel_values, patch_mask=None):
        x = self.hidden_states(op, pixel_values, None, patch_mask)[-1]
        return self.post_layernorm(op, x)


class Idefics3VisionModel(VisionTowerModel):
    """``vision_model`` -> ``last_hidden_state`` (whole tiles: every patch real)."""

    config_class = Idefics3VisionConfig
    tower_class = Idefics3VisionTransformer

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        return {"last_hidden_state": ["batch", c.patches_per_side**2, c.hidden_size]}

    def forward(self, op, pixel_values):
        return {"last_hidden_state": self.vision_model(op, pixel_values)}


MODEL_TYPES = {"idefics3_vision": Idefics3VisionModel}
