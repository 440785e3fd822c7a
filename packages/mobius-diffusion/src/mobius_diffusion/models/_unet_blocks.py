"""The attention blocks of diffusers' ``UNet2DConditionModel`` (SD 1.x/2.x, SDXL) and ``ControlNetModel``.

``Transformer2DModel`` (continuous input, ``layer_norm`` blocks): GroupNorm, a 1x1
conv or linear ``proj_in``, ``BasicTransformerBlock``s (self-attention,
cross-attention to the text, GEGLU feed-forward, each pre-LayerNorm and residual),
``proj_out``, the input added back. ``CrossAttnDownBlock2D``, ``CrossAttnUpBlock2D``
and ``UNetMidBlock2DCrossAttn`` are the resnet blocks of :mod:`._resnet` with one
such transformer after each resnet.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import Conv2d, GroupNorm, LayerNorm, Linear
from mobius_diffusion.models._attention import Attention, FeedForward
from mobius_diffusion.models._ip_adapter_attention import IPAdapterAttention
from mobius_diffusion.models._resnet import DownBlock2D, UNetMidBlock2D, UpBlock2D


class BasicTransformerBlock(nn.Module):
    """``norm1``/``attn1`` (self), ``norm2``/``attn2`` (cross), ``norm3``/``ff``; each added to its input."""

    def __init__(
        self,
        dim: int,
        heads: int,
        head_dim: int,
        cross_attention_dim: int,
        ip_adapter: bool = False,
    ) -> None:
        super().__init__()
        self.norm1 = LayerNorm(dim, 1e-5)
        self.attn1 = Attention(dim, heads, head_dim)
        self.norm2 = LayerNorm(dim, 1e-5)
        if ip_adapter:  # its context is then an IPContext (text, image tokens, scale)
            self.attn2 = IPAdapterAttention(dim, heads, head_dim, cross_attention_dim)
        else:
            self.attn2 = Attention(dim, heads, head_dim, cross_attention_dim=cross_attention_dim)
        self.norm3 = LayerNorm(dim, 1e-5)
        self.ff = FeedForward(dim, activation_fn="geglu")

    def forward(self, op, x, context):
        x = op.Add(self.attn1(op, self.norm1(op, x)), x)
        x = op.Add(self.attn2(op, self.norm2(op, x), context), x)
        return op.Add(self.ff(op, self.norm3(op, x)), x)


class Transformer2DModel(nn.Module):
    """A stack of ``BasicTransformerBlock``s over the pixels of ``[b, c, h, w]``, residual around it all."""

    def __init__(
        self,
        heads: int,
        channels: int,
        depth: int,
        cross_attention_dim: int,
        groups: int,
        use_linear_projection: bool,
        ip_adapter: bool = False,
    ) -> None:
        super().__init__()
        self.linear = use_linear_projection
        project = (
            (lambda i, o: Linear(i, o, bias=True))
            if self.linear
            else (lambda i, o: Conv2d(i, o, 1))
        )
        self.norm = GroupNorm(groups, channels, 1e-6)
        self.proj_in = project(channels, channels)
        self.transformer_blocks = nn.ModuleList(
            [
                BasicTransformerBlock(
                    channels, heads, channels // heads, cross_attention_dim, ip_adapter
                )
                for _ in range(depth)
            ]
        )
        self.proj_out = project(channels, channels)

    def forward(self, op, x, context):
        h = self.norm(op, x)
        if not self.linear:
            h = self.proj_in(op, h)
        tokens = op.Transpose(op.Reshape(h, op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1])
        if self.linear:
            tokens = self.proj_in(op, tokens)  # [b, h*w, c]
        for block in self.transformer_blocks:
            tokens = block(op, tokens, context)
        if self.linear:
            tokens = self.proj_out(op, tokens)
        h = op.Reshape(op.Transpose(tokens, perm=[0, 2, 1]), op.Shape(x))
        if not self.linear:
            h = self.proj_out(op, h)
        return op.Add(h, x)


@dataclass(frozen=True)
class CrossAttention:
    """What a block's transformers share: heads, text width, projection kind, GroupNorm groups."""

    heads: int
    cross_attention_dim: int
    use_linear_projection: bool
    groups: int
    #: IP-Adapter attention in every cross-attention (``--ip-adapter``).
    ip_adapter: bool = False

    def transformers(self, channels: int, depths: list[int]) -> nn.ModuleList:
        """One ``Transformer2DModel`` of ``depth`` blocks per entry of ``depths``."""
        return nn.ModuleList(
            [
                Transformer2DModel(
                    self.heads,
                    channels,
                    depth,
                    self.cross_attention_dim,
                    self.groups,
                    self.use_linear_projection,
                    self.ip_adapter,
                )
                for depth in depths
            ]
        )


class CrossAttnDownBlock2D(DownBlock2D):
    """``DownBlock2D`` with a transformer after each resnet (``depths``: its blocks per layer)."""

    def __init__(self, attention: CrossAttention, depths: list[int], *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.attentions = attention.transformers(self.resnets[0].conv1.weight.shape[0], depths)

    def layer(self, op, i, x, temb, context):
        return self.attentions[i](op, super().layer(op, i, x, temb, context), context)


class CrossAttnUpBlock2D(UpBlock2D):
    """``UpBlock2D`` with a transformer after each resnet (``depths``: its blocks per layer)."""

    def __init__(self, attention: CrossAttention, depths: list[int], *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.attentions = attention.transformers(self.resnets[0].conv1.weight.shape[0], depths)

    def layer(self, op, i, x, temb, context):
        return self.attentions[i](op, super().layer(op, i, x, temb, context), context)


class UNetMidBlock2DCrossAttn(UNetMidBlock2D):
    """A resnet, then (transformer, resnet) pairs, one per entry of ``depths``."""

    def __init__(
        self, attention: CrossAttention, depths: list[int], channels: int, *args, **kwargs
    ):
        super().__init__(channels, *args, num_layers=len(depths), add_attention=False, **kwargs)
        self.attentions = attention.transformers(channels, depths)
