"""AnimateDiff's motion modules and the UNet blocks that carry them (diffusers' unet_motion_model.py).

A motion module (``AnimateDiffTransformer3D``) takes ``[b * f, c, h, w]`` with the
frame count and mixes each pixel's ``f`` states: GroupNorm over each video, two
self-attentions with sinusoidal frame positions added before each, a GEGLU
feed-forward, residual around it all. The motion blocks are :mod:`._resnet` /
:mod:`._unet_blocks`' 2-D blocks with one module after each layer; their
``context`` is ``(text states, frames)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import GroupNorm, Linear
from mobius_diffusion.models._resnet import DownBlock2D, UpBlock2D
from mobius_diffusion.models._unet_blocks import (
    BasicTransformerBlock,
    CrossAttnDownBlock2D,
    CrossAttnUpBlock2D,
    UNetMidBlock2DCrossAttn,
)


def _ints(op, values):
    return op.Constant(value_ints=list(values))


class SinusoidalPositions(nn.Module):
    """diffusers' ``SinusoidalPositionalEmbedding``: ``pe[:, :frames]`` added to ``[n, frames, dim]``."""

    def __init__(self, dim: int, max_positions: int) -> None:
        super().__init__()
        self.pe = nn.Parameter([1, max_positions, dim])  # a saved buffer: read from the checkpoint

    def forward(self, op, x):
        return op.Add(
            x, op.Slice(self.pe, _ints(op, [0]), op.Shape(x, start=1, end=2), _ints(op, [1]))
        )


class TemporalTransformerBlock(BasicTransformerBlock):
    """A ``BasicTransformerBlock`` over frames: ``attn2`` is a second self-attention
    (``double_self_attention``), and both attentions see the positions added to their input."""

    def __init__(self, dim: int, heads: int, max_positions: int) -> None:
        super().__init__(dim, heads, dim // heads, cross_attention_dim=dim)
        self.pos_embed = SinusoidalPositions(dim, max_positions)

    def forward(self, op, x, context=None):
        x = op.Add(self.attn1(op, self.pos_embed(op, self.norm1(op, x))), x)
        x = op.Add(self.attn2(op, self.pos_embed(op, self.norm2(op, x))), x)
        return op.Add(self.ff(op, self.norm3(op, x)), x)


class AnimateDiffTransformer3D(nn.Module):
    """A motion module: GroupNorm over each video, each pixel's frames through the blocks, residual."""

    def __init__(self, heads: int, channels: int, depth: int, groups: int, max_positions: int):
        super().__init__()
        self.norm = GroupNorm(groups, channels, 1e-6, spatial_dims=3)
        self.proj_in = Linear(channels, channels, bias=True)
        self.transformer_blocks = nn.ModuleList(
            [TemporalTransformerBlock(channels, heads, max_positions) for _ in range(depth)]
        )
        self.proj_out = Linear(channels, channels, bias=True)

    def forward(self, op, x, frames):
        """``x`` [b * f, c, h, w]; ``frames`` int64 [1]."""
        channels, pixels = op.Shape(x, start=1, end=2), op.Shape(x, start=2)
        video = op.Reshape(x, op.Concat(_ints(op, [-1]), frames, op.Shape(x, start=1), axis=0))
        h = self.norm(op, op.Transpose(video, perm=[0, 2, 1, 3, 4]))  # [b, c, f, h, w]
        tokens = op.Reshape(
            op.Transpose(h, perm=[0, 3, 4, 2, 1]),
            op.Concat(_ints(op, [-1]), frames, channels, axis=0),
        )  # [b * h * w, f, c]
        tokens = self.proj_in(op, tokens)
        for block in self.transformer_blocks:
            tokens = block(op, tokens)
        tokens = self.proj_out(op, tokens)
        out = op.Reshape(tokens, op.Concat(_ints(op, [-1]), pixels, frames, channels, axis=0))
        out = op.Reshape(op.Transpose(out, perm=[0, 3, 4, 1, 2]), op.Shape(x))  # [b * f, c, h, w]
        return op.Add(out, x)


@dataclass(frozen=True)
class Motion:
    """What a block's motion modules share: heads, GroupNorm groups, position table length."""

    heads: int
    groups: int
    max_positions: int

    def modules(self, channels: int, depths: list[int]) -> nn.ModuleList:
        """One motion module of ``depth`` blocks per entry of ``depths``."""
        return nn.ModuleList(
            [
                AnimateDiffTransformer3D(self.heads, channels, d, self.groups, self.max_positions)
                for d in depths
            ]
        )


class _MotionLayers:
    """A 2-D block with a motion module after each layer; its ``context`` is ``(text, frames)``."""

    def __init__(self, motion: Motion, temporal_depths: list[int], *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.motion_modules = motion.modules(self.resnets[0].conv1.weight.shape[0], temporal_depths)

    def layer(self, op, i, x, temb, context):
        text, frames = context
        return self.motion_modules[i](op, super().layer(op, i, x, temb, text), frames)


class DownBlockMotion(_MotionLayers, DownBlock2D):
    pass


class CrossAttnDownBlockMotion(_MotionLayers, CrossAttnDownBlock2D):
    pass


class UpBlockMotion(_MotionLayers, UpBlock2D):
    pass


class CrossAttnUpBlockMotion(_MotionLayers, CrossAttnUpBlock2D):
    pass


class UNetMidBlockCrossAttnMotion(UNetMidBlock2DCrossAttn):
    """A resnet, then (transformer, motion module, resnet) per layer; no motion modules when
    ``motion`` is None (``use_motion_mid_block`` false: diffusers' plain mid-block)."""

    def __init__(self, motion: Motion | None, temporal_depths, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        channels = self.resnets[0].conv1.weight.shape[0]
        self.motion_modules = motion.modules(channels, temporal_depths) if motion else None

    def forward(self, op, x, temb=None, context=None):
        text, frames = context
        x = self.resnets[0](op, x, temb)
        for i, resnet in enumerate(self.resnets[1:]):
            x = self.attentions[i](op, x, text)
            if self.motion_modules is not None:
                x = self.motion_modules[i](op, x, frames)
            x = resnet(op, x, temb)
        return x
