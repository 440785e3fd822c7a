"""The "simple" blocks of diffusers' ``UNet2DConditionModel`` (unCLIP, Kandinsky 2.x).

``ResnetDownsampleBlock2D`` / ``ResnetUpsampleBlock2D``: the resnet blocks of
:mod:`._resnet` whose down/up-sampler is itself a resnet that resizes both of its
paths after the first norm (2x2 average pooling, nearest 2x). The ``SimpleCrossAttn``
blocks add an attention after each resnet (``AttnAddedKVProcessor``): GroupNorm over
the pixels, queries from the pixels, keys and values from the text (``add_k_proj``,
``add_v_proj``) followed by the pixels' own (``to_k``, ``to_v``), the input added back.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import GroupNorm, Linear
from mobius_diffusion.models._attention import Attention
from mobius_diffusion.models._resnet import (
    DownBlock2D,
    ResnetBlock2D,
    UNetMidBlock2D,
    UpBlock2D,
    upsample_nearest,
)

_CROSS_NORM_GROUPS = 32  # diffusers' Attention fixes ``cross_attention_norm_num_groups``


class ResampleResnetBlock2D(ResnetBlock2D):
    """``ResnetBlock2D(up=True)`` (nearest 2x) or ``(down=True)`` (2x2 average pooling)."""

    def __init__(self, mode: str, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.mode = mode

    def resample(self, op, x):
        if self.mode == "up":
            return upsample_nearest(op, x)
        return op.AveragePool(x, kernel_shape=[2, 2], strides=[2, 2])


class AddedKVAttention(Attention):
    """Self-attention over the pixels of ``[b, c, h, w]`` with the text's keys and values prepended.

    ``cross_norm``: diffusers' ``cross_attention_norm="group_norm"``, a GroupNorm
    (``norm_cross``) over the text's channels before its projections.
    """

    def __init__(
        self,
        channels: int,
        head_dim: int,
        cross_attention_dim: int,
        groups: int,
        cross_norm: bool,
    ) -> None:
        super().__init__(channels, channels // head_dim, head_dim, bias=True)
        inner = channels
        self.group_norm = GroupNorm(groups, channels, 1e-5)
        self.add_k_proj = Linear(cross_attention_dim, inner, bias=True)
        self.add_v_proj = Linear(cross_attention_dim, inner, bias=True)
        self.norm_cross = (
            GroupNorm(_CROSS_NORM_GROUPS, cross_attention_dim, 1e-5, spatial_dims=1)
            if cross_norm
            else None
        )

    def forward(self, op, x, context):
        def tokens(v):  # [b, c, h, w] -> [b, h*w, c]
            return op.Transpose(op.Reshape(v, op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1])

        if self.norm_cross is not None:  # over the channels: [b, s, c] -> [b, c, s] and back
            context = op.Transpose(
                self.norm_cross(op, op.Transpose(context, perm=[0, 2, 1])), perm=[0, 2, 1]
            )
        h = tokens(self.group_norm(op, x))
        k = op.Concat(self.add_k_proj(op, context), self.to_k(op, h), axis=1)
        v = op.Concat(self.add_v_proj(op, context), self.to_v(op, h), axis=1)
        out = self.to_out[0](op, self.attend(op, self.to_q(op, h), k, v))
        return op.Add(op.Reshape(op.Transpose(out, perm=[0, 2, 1]), op.Shape(x)), x)


class ResnetDownsampleBlock2D(DownBlock2D):
    """``DownBlock2D`` whose downsampler is a resnet (``downsamplers.0``), given the time embedding."""

    def __init__(
        self,
        in_channels,
        out_channels,
        num_layers,
        temb_channels,
        groups,
        eps,
        act_fn,
        add_downsample,
        time_embedding_norm,
    ) -> None:
        super().__init__(
            in_channels,
            out_channels,
            num_layers,
            temb_channels,
            groups,
            eps,
            act_fn,
            False,
            time_embedding_norm=time_embedding_norm,
        )
        resnet = (out_channels, out_channels, temb_channels, groups, eps, act_fn)
        self.downsamplers = (
            nn.ModuleList([ResampleResnetBlock2D("down", *resnet, time_embedding_norm)])
            if add_downsample
            else None
        )

    def forward(self, op, x, temb=None, context=None, residual=None):
        states = []
        for i in range(len(self.resnets)):
            x = self.layer(op, i, x, temb, context)
            states.append(x)
        if self.downsamplers is not None:
            x = self.downsamplers[0](op, x, temb)
            states.append(x)
        return x, states


class ResnetUpsampleBlock2D(UpBlock2D):
    """``UpBlock2D`` whose upsampler is a resnet (``upsamplers.0``), given the time embedding."""

    def __init__(
        self,
        resnet_in_channels,
        out_channels,
        temb_channels,
        groups,
        eps,
        act_fn,
        add_upsample,
        time_embedding_norm,
    ) -> None:
        super().__init__(
            resnet_in_channels,
            out_channels,
            temb_channels,
            groups,
            eps,
            act_fn,
            False,
            time_embedding_norm,
        )
        resnet = (out_channels, out_channels, temb_channels, groups, eps, act_fn)
        self.upsamplers = (
            nn.ModuleList([ResampleResnetBlock2D("up", *resnet, time_embedding_norm)])
            if add_upsample
            else None
        )

    def forward(self, op, x, temb=None, context=None, skips=None, upsample_like=None):
        """As ``UpBlock2D``; the upsampler doubles the size (diffusers passes it no target size)."""
        skips = list(skips or [])
        for i in range(len(self.resnets)):
            x = self.layer(op, i, op.Concat(x, skips.pop(), axis=1), temb, context)
        return x if self.upsamplers is None else self.upsamplers[0](op, x, temb)


@dataclass(frozen=True)
class SimpleCrossAttention:
    """What a block's attentions share: head width, text width, GroupNorm groups, the text's norm."""

    head_dim: int
    cross_attention_dim: int
    groups: int
    cross_norm: bool

    def attentions(self, channels: int, count: int) -> nn.ModuleList:
        """``count`` ``AddedKVAttention``s over ``channels``."""
        return nn.ModuleList(
            [
                AddedKVAttention(
                    channels, self.head_dim, self.cross_attention_dim, self.groups, self.cross_norm
                )
                for _ in range(count)
            ]
        )


def _width(block) -> int:
    return block.resnets[0].conv1.weight.shape[0]


class SimpleCrossAttnDownBlock2D(ResnetDownsampleBlock2D):
    """``ResnetDownsampleBlock2D`` with an ``AddedKVAttention`` after each resnet."""

    def __init__(self, attention: SimpleCrossAttention, *args) -> None:
        super().__init__(*args)
        self.attentions = attention.attentions(_width(self), len(self.resnets))

    def layer(self, op, i, x, temb, context):
        return self.attentions[i](op, super().layer(op, i, x, temb, context), context)


class SimpleCrossAttnUpBlock2D(ResnetUpsampleBlock2D):
    """``ResnetUpsampleBlock2D`` with an ``AddedKVAttention`` after each resnet."""

    def __init__(self, attention: SimpleCrossAttention, *args) -> None:
        super().__init__(*args)
        self.attentions = attention.attentions(_width(self), len(self.resnets))

    def layer(self, op, i, x, temb, context):
        return self.attentions[i](op, super().layer(op, i, x, temb, context), context)


class UNetMidBlock2DSimpleCrossAttn(UNetMidBlock2D):
    """A resnet, an ``AddedKVAttention``, a resnet."""

    def __init__(
        self,
        attention: SimpleCrossAttention,
        channels,
        temb_channels,
        groups,
        eps,
        act_fn,
        output_scale_factor,
        time_embedding_norm,
    ) -> None:
        super().__init__(
            channels,
            temb_channels,
            groups,
            eps,
            act_fn,
            add_attention=False,
            output_scale_factor=output_scale_factor,
            time_embedding_norm=time_embedding_norm,
        )
        self.attentions = attention.attentions(channels, 1)
