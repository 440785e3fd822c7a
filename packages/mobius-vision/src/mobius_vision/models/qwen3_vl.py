"""Qwen3-VL: Qwen2-VL's patch tower with learned positions and DeepStack, over an M-RoPE Qwen3.

The tower (``visual`` in the checkpoint) embeds the processor's flattened patches (a
biased Conv3d), adds its learned ``pos_embed`` table resampled bilinearly (corners
aligned) to each image's patch grid, and runs LayerNorm blocks with 2-D rotary and
attention within each image frame (no windows). Its ``merger`` (``norm``, then each run
of ``merge^2`` patches concatenated, ``linear_fc1``, GELU, ``linear_fc2``) gives the
image features; the blocks at ``deepstack_visual_indexes`` feed their own
``deepstack_merger_list`` mergers (normed after the concatenation), whose outputs the
decoder adds to its hidden states at the image tokens after its first layers (DeepStack).

In the split form the vision graph also writes ``deepstack_features [levels,
num_image_tokens, text_hidden]``; the embedding graph scatters them to the image
placeholders as ``deepstack_embeds [levels, batch, sequence, text_hidden]`` (zeros
elsewhere, and on decode steps), which the decoder graph takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear, get_activation
from mobius.errors import ConfigError
from mobius_text.models.qwen3_vl_text import Qwen3VLTextConfig, Qwen3VLTextForCausalLM
from mobius_vision.models._deepstack import DeepStackMixin
from mobius_vision.models.qwen2_5_vl import _Attributes
from mobius_vision.models.qwen2_vl import (
    PatchEmbed,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLVisionBlock,
    Qwen2VLVisionConfig,
    Qwen2VLVisionTower,
    _column,
    _Kernel,
    patch_images,
    patch_layout,
    same_group,
)

FLOAT = ir.DataType.FLOAT


@dataclass
class Qwen3VLVisionConfig(Qwen2VLVisionConfig):
    intermediate_size: int = 4304
    num_position_embeddings: int = 2304
    deepstack_visual_indexes: tuple[int, ...] = ()

    @classmethod
    def from_hf(cls, hf: Any) -> Qwen3VLVisionConfig:
        # Qwen2-VL's names: the tower's width is hidden_size, the merger's out_hidden_size
        proxy = dict(vars(hf), embed_dim=hf.hidden_size, hidden_size=hf.out_hidden_size)
        proxy.update(mlp_ratio=0, num_heads=hf.num_heads, depth=hf.depth, model_type=hf.model_type)
        fields = vars(Qwen2VLVisionConfig.from_hf(_Attributes(proxy)))
        indexes = tuple(int(i) for i in hf.deepstack_visual_indexes)
        if not indexes:
            raise ConfigError(f"{hf.model_type}: no deepstack_visual_indexes (no DeepStack)")
        if len(set(indexes)) != len(indexes) or not all(0 <= i < hf.depth for i in indexes):
            raise ConfigError(
                f"{hf.model_type}: deepstack_visual_indexes {list(indexes)} must be distinct "
                f"blocks of the {hf.depth}"
            )
        return cls(
            **fields,
            intermediate_size=hf.intermediate_size,
            num_position_embeddings=int(hf.num_position_embeddings),
            deepstack_visual_indexes=indexes,
        )


class Qwen3VLVisionMlp(nn.Module):
    def __init__(self, dim: int, hidden: int, act: str) -> None:
        super().__init__()
        self.linear_fc1 = Linear(dim, hidden, bias=True)
        self.linear_fc2 = Linear(hidden, dim, bias=True)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.linear_fc2(op, self.act(op, self.linear_fc1(op, x)))


class Qwen3VLVisionBlock(Qwen2VLVisionBlock):
    def make_mlp(self, config: Qwen3VLVisionConfig) -> nn.Module:
        return Qwen3VLVisionMlp(config.embed_dim, config.intermediate_size, config.hidden_act)


class Qwen3VLPatchMerger(nn.Module):
    """``norm`` (before the ``merge^2`` concatenation, or after: ``postshuffle``), then
    ``linear_fc1``, GELU, ``linear_fc2`` to the decoder's width."""

    def __init__(self, config: Qwen3VLVisionConfig, postshuffle: bool) -> None:
        super().__init__()
        self.width = config.embed_dim * config.spatial_merge_size**2
        self.postshuffle = postshuffle
        self.norm = LayerNorm(self.width if postshuffle else config.embed_dim, 1e-6)
        self.linear_fc1 = Linear(self.width, self.width, bias=True)
        self.act = get_activation("gelu")
        self.linear_fc2 = Linear(self.width, config.hidden_size, bias=True)

    def forward(self, op, x):
        shuffle = op.Constant(value_ints=[-1, self.width])
        if self.postshuffle:
            x = self.norm(op, op.Reshape(x, shuffle))
        else:
            x = op.Reshape(self.norm(op, x), shuffle)  # [image_tokens, embed * merge^2]
        return self.linear_fc2(op, self.act(op, self.linear_fc1(op, x)))


class _BiasedKernel(_Kernel):
    def __init__(self, shape: list[int]) -> None:
        super().__init__(shape)
        self.bias = nn.Parameter([shape[0]])

    def forward(self, op):
        return super().forward(op), self.bias


class Qwen3VLPatchEmbed(PatchEmbed):
    """Qwen2-VL's patch matmul plus the Conv3d's bias."""

    def __init__(self, config: Qwen3VLVisionConfig) -> None:
        super().__init__(config)
        t, p = config.temporal_patch_size, config.patch_size
        self.proj = _BiasedKernel([config.embed_dim, config.in_channels, t, p, p])

    def forward(self, op, pixel_values):
        kernel, bias = self.proj(op)
        return op.Add(op.MatMul(pixel_values, op.Transpose(kernel, perm=[1, 0])), bias)


def bilinear_taps(op, index, size, side: int):
    """Per patch the two taps ``[patches, 2]`` into a ``side``-long table and their weights,
    resampling an axis of ``size`` patches with aligned corners (transformers'
    ``get_vision_interpolation_indices_and_weights``, bilinear)."""
    one = op.Constant(value_int=1)
    span = op.Cast(op.Max(op.Sub(size, one), one), to=FLOAT)
    src = op.Div(op.Mul(op.Cast(index, to=FLOAT), op.Constant(value_float=side - 1.0)), span)
    floor = op.Floor(src)
    offsets = op.Constant(value_floats=[0.0, 1.0])
    taps = op.Add(
        op.Unsqueeze(op.Cast(floor, to=ir.DataType.INT64), [1]),
        op.Cast(offsets, to=ir.DataType.INT64),
    )
    taps = op.Clip(taps, op.Constant(value_int=0), op.Constant(value_int=side - 1))
    distance = op.Abs(op.Sub(op.Unsqueeze(op.Sub(src, floor), [1]), offsets))
    weights = op.Max(op.Sub(op.Constant(value_float=1.0), distance), op.Constant(value_float=0.0))
    return taps, weights  # [patches, 2] each


class Qwen3VLVisionTower(Qwen2VLVisionTower):
    """HF ``Qwen3VLVisionModel``: returns the merged features and the DeepStack levels."""

    block_class = Qwen3VLVisionBlock

    def __init__(self, config: Qwen3VLVisionConfig) -> None:
        super().__init__(config)
        self.patch_embed = Qwen3VLPatchEmbed(config)
        self.pos_embed = Embedding(config.num_position_embeddings, config.embed_dim)
        self.side = int(config.num_position_embeddings**0.5)  # transformers' grid side
        self.deepstack_merger_list = nn.ModuleList(
            [Qwen3VLPatchMerger(config, True) for _ in config.deepstack_visual_indexes]
        )

    def make_merger(self, config: Qwen3VLVisionConfig) -> nn.Module:
        return Qwen3VLPatchMerger(config, False)

    def positions(self, op, pixel_values, grid_thw, row, col):
        """The learned positions resampled to each patch's grid cell ``[patches, embed]``."""
        _, image = patch_images(op, pixel_values, grid_thw)
        h_taps, h_weights = bilinear_taps(
            op, row, op.Gather(_column(op, grid_thw, 1), image), self.side
        )
        w_taps, w_weights = bilinear_taps(
            op, col, op.Gather(_column(op, grid_thw, 2), image), self.side
        )
        side = op.Constant(value_int=self.side)
        # the four corners, h-tap major: [patches, 2, 2] -> [patches, 4]
        index = op.Add(op.Unsqueeze(op.Mul(h_taps, side), [2]), op.Unsqueeze(w_taps, [1]))
        weight = op.Mul(op.Unsqueeze(h_weights, [2]), op.Unsqueeze(w_weights, [1]))
        corners = op.Constant(value_ints=[0, 4])
        table = self.pos_embed(op, op.Reshape(index, corners))  # [patches, 4, embed]
        # computed in float32, used in the table's type (transformers makes them in its dtype)
        weight = op.CastLike(op.Unsqueeze(op.Reshape(weight, corners), [2]), table)
        return op.ReduceSum(op.Mul(table, weight), [1], keepdims=0)

    def forward(self, op, pixel_values, grid_thw):
        segment, row, col = patch_layout(op, pixel_values, grid_thw, self.config.spatial_merge_size)
        x = self.patch_embed(op, pixel_values)  # [patches, embed]
        x = op.Add(x, self.positions(op, pixel_values, grid_thw, row, col))
        cos, sin = self.rotary(op, row, col)
        mask = same_group(op, segment)
        indexes = self.config.deepstack_visual_indexes
        levels = []
        for i, block in enumerate(self.blocks):
            x = block(op, x, cos, sin, mask)
            if i in indexes:  # in block order, each by its own merger
                merger = self.deepstack_merger_list[indexes.index(i)]
                levels.append(op.Unsqueeze(merger(op, x), [0]))
        features = self.merger(op, x)  # [image_tokens, text_hidden]
        return features, op.Concat(*levels, axis=0)  # [levels, image_tokens, text_hidden]


@dataclass
class Qwen3VLConfig(Qwen2VLConfig):
    vision_config_class = Qwen3VLVisionConfig
    text_config_class = Qwen3VLTextConfig

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        levels = len(fields["vision"].deepstack_visual_indexes)
        if levels > fields["text"].num_hidden_layers:
            raise ConfigError(
                f"{hf_config.model_type}: {levels} DeepStack levels for "
                f"{fields['text'].num_hidden_layers} decoder layers"
            )
        return fields


class Qwen3VLForConditionalGeneration(DeepStackMixin, Qwen2VLForConditionalGeneration):
    """Qwen2-VL's composition with DeepStack: the tower's levels added after the first layers."""

    config_class = Qwen3VLConfig
    tower_class = Qwen3VLVisionTower
    decoder_class = Qwen3VLTextForCausalLM

    @property
    def levels(self) -> int:
        return len(self.config.vision.deepstack_visual_indexes)


MODEL_TYPES = {"qwen3_vl": Qwen3VLForConditionalGeneration}
