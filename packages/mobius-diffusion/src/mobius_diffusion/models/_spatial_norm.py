"""diffusers' spatially conditioned norm (MoVQ, ``norm_type="spatial"``) and the blocks built on it.

``SpatialNorm``: a GroupNorm of the features whose scale and shift are 1x1 convs of the
quantised latents ``zq``, resized (nearest) to the features. The resnet and the
attention over pixels of a spatial-norm decoder take ``zq`` beside their input.
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components import Conv2d, GroupNorm
from mobius_diffusion.models._attention import Attention
from mobius_diffusion.models._resnet import activation, upsample_nearest

#: diffusers' SpatialNorm fixes its GroupNorm's groups and epsilon.
SPATIAL_NORM_GROUPS = 32
_EPS = 1e-6


class SpatialNorm(nn.Module):
    """GroupNorm(32) of ``f``, scaled by ``conv_y`` and shifted by ``conv_b`` of ``zq`` resized to ``f``."""

    def __init__(self, channels: int, zq_channels: int) -> None:
        super().__init__()
        self.norm_layer = GroupNorm(SPATIAL_NORM_GROUPS, channels, _EPS)
        self.conv_y = Conv2d(zq_channels, channels, 1)
        self.conv_b = Conv2d(zq_channels, channels, 1)

    def forward(self, op, f, zq):
        zq = upsample_nearest(op, zq, like=f)  # [b, zq_channels, h, w] of f
        return op.Add(op.Mul(self.norm_layer(op, f), self.conv_y(op, zq)), self.conv_b(op, zq))


class ResnetBlockCondNorm2D(nn.Module):
    """``ResnetBlock2D`` with spatial norms of ``zq`` in place of its GroupNorms, and no time embedding."""

    def __init__(self, in_channels: int, out_channels: int, zq_channels: int, act_fn: str):
        super().__init__()
        self.act = activation(act_fn)
        self.norm1 = SpatialNorm(in_channels, zq_channels)
        self.conv1 = Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm2 = SpatialNorm(out_channels, zq_channels)
        self.conv2 = Conv2d(out_channels, out_channels, 3, padding=1)
        self.conv_shortcut = (
            Conv2d(in_channels, out_channels, 1) if in_channels != out_channels else None
        )

    def forward(self, op, x, zq):
        h = self.conv1(op, self.act(op, self.norm1(op, x, zq)))
        h = self.conv2(op, self.act(op, self.norm2(op, h, zq)))
        return op.Add(x if self.conv_shortcut is None else self.conv_shortcut(op, x), h)


class SpatialAttentionBlock(Attention):
    """One head over the pixels after a ``spatial_norm`` of ``zq``; the input added back."""

    def __init__(self, channels: int, zq_channels: int) -> None:
        super().__init__(channels, heads=1, dim_head=channels, bias=True)
        self.spatial_norm = SpatialNorm(channels, zq_channels)

    def forward(self, op, x, zq):
        h = self.spatial_norm(op, x, zq)
        tokens = op.Transpose(op.Reshape(h, op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1])
        out = super().forward(op, tokens)  # [b, h*w, c]
        return op.Add(op.Reshape(op.Transpose(out, perm=[0, 2, 1]), op.Shape(x)), x)
