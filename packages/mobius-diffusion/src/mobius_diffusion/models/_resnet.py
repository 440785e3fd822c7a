"""The convolutional blocks of diffusers' VAEs, UNets and ControlNets, over ``[batch, channels, h, w]``.

``ResnetBlock2D`` (optional time embedding, ``default`` or ``scale_shift``),
``Downsample2D`` / ``Upsample2D``, the self-attention over pixels of the VAE
mid-block (``AttentionBlock``), and the resnet-only down, up and mid blocks
(``DownBlock2D``, ``UpBlock2D``, ``UNetMidBlock2D``). The attention blocks of the
UNet subclass these and add their transformers after each resnet. Submodules
carry diffusers' names (``resnets.0.conv1``, ``downsamplers.0.conv``).
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, GroupNorm, Linear, get_activation
from mobius.errors import ConfigError
from mobius_diffusion.models._attention import Attention

#: diffusers' ``get_activation`` names that mobius builds.
_ACTIVATIONS = ("silu", "swish", "gelu", "relu")


def activation(name: str):
    """The graph function of a diffusers activation name; ``ConfigError`` for one mobius does not build."""
    if name not in _ACTIVATIONS:
        raise ConfigError(f"activation {name!r} is not built by mobius; it builds {_ACTIVATIONS}")
    return get_activation(name)


class ResnetBlock2D(nn.Module):
    """GroupNorm, act, conv; plus the projected time embedding; GroupNorm, act, conv; plus the shortcut.

    ``time_embedding_norm`` ``"default"`` adds the embedding before ``norm2``;
    ``"scale_shift"`` projects it to ``2 * out_channels`` and modulates after ``norm2``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int | None = None,
        temb_channels: int | None = None,
        groups: int = 32,
        eps: float = 1e-6,
        act_fn: str = "silu",
        time_embedding_norm: str = "default",
        output_scale_factor: float = 1.0,
    ) -> None:
        super().__init__()
        if time_embedding_norm not in ("default", "scale_shift"):
            raise ConfigError(
                f"resnet time_embedding_norm {time_embedding_norm!r} is not built by mobius"
            )
        out_channels = out_channels or in_channels
        self.time_embedding_norm, self.output_scale_factor = (
            time_embedding_norm,
            output_scale_factor,
        )
        self.act = activation(act_fn)
        self.norm1 = GroupNorm(groups, in_channels, eps)
        self.conv1 = Conv2d(in_channels, out_channels, 3, padding=1)
        self.time_emb_proj = None
        if temb_channels is not None:
            scale_shift = time_embedding_norm == "scale_shift"
            self.time_emb_proj = Linear(
                temb_channels, out_channels * (2 if scale_shift else 1), bias=True
            )
        self.norm2 = GroupNorm(groups, out_channels, eps)
        self.conv2 = Conv2d(out_channels, out_channels, 3, padding=1)
        self.conv_shortcut = (
            Conv2d(in_channels, out_channels, 1) if in_channels != out_channels else None
        )

    def resample(self, op, x):
        """Identity; the up/down-sampling resnets of some UNets resize here (both paths)."""
        return x

    def forward(self, op, x, temb=None):
        h = self.act(op, self.norm1(op, x))
        x, h = self.resample(op, x), self.resample(op, h)
        h = self.conv1(op, h)
        if self.time_emb_proj is not None and temb is not None:
            temb = op.Unsqueeze(self.time_emb_proj(op, self.act(op, temb)), [2, 3])  # [b, c, 1, 1]
        else:
            temb = None
        if self.time_embedding_norm == "scale_shift":
            scale, shift = op.Split(temb, num_outputs=2, axis=1, _outputs=2)
            h = self.norm2(op, h)
            h = op.Add(op.Add(h, op.Mul(h, scale)), shift)  # h * (1 + scale) + shift
        else:
            h = self.norm2(op, h if temb is None else op.Add(h, temb))
        h = self.conv2(op, self.act(op, h))
        shortcut = x if self.conv_shortcut is None else self.conv_shortcut(op, x)
        out = op.Add(shortcut, h)
        if self.output_scale_factor != 1:
            out = op.Div(out, op.CastLike(self.output_scale_factor, out))
        return out


class Downsample2D(nn.Module):
    """A stride-2 3x3 ``conv``; ``padding=0`` pads only bottom and right first (diffusers' ``(0, 1, 0, 1)``)."""

    def __init__(self, channels: int, out_channels: int | None = None, padding: int = 1) -> None:
        super().__init__()
        pads = padding if padding else (0, 0, 1, 1)  # (top, left, bottom, right)
        self.conv = Conv2d(channels, out_channels or channels, 3, stride=2, padding=pads)

    def forward(self, op, x):
        return self.conv(op, x)


def upsample_nearest(op, x: ir.Value, like: ir.Value | None = None) -> ir.Value:
    """``F.interpolate(mode="nearest")``: 2x, or to the spatial size of ``like`` (a UNet's skip).

    With ``like`` the size is the skip's, as diffusers passes ``upsample_size`` when
    the latent is not a multiple of the UNet's total downscale; when it is, the two agree.
    """
    attrs = dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    if like is None:
        scales = op.Constant(value=ir.tensor([1.0, 1.0, 2.0, 2.0], dtype=ir.DataType.FLOAT))
        return op.Resize(x, None, scales, **attrs)
    sizes = op.Concat(op.Shape(x, start=0, end=2), op.Shape(like, start=2, end=4), axis=0)
    return op.Resize(x, None, None, sizes, **attrs)


class Upsample2D(nn.Module):
    """Nearest 2x (or to a given size), then a 3x3 ``conv``."""

    def __init__(self, channels: int, out_channels: int | None = None) -> None:
        super().__init__()
        self.conv = Conv2d(channels, out_channels or channels, 3, padding=1)

    def forward(self, op, x, like=None):
        return self.conv(op, upsample_nearest(op, x, like))


class AttentionBlock(Attention):
    """Self-attention over the pixels of ``[b, c, h, w]``: ``group_norm`` first, the input added back."""

    def __init__(
        self,
        channels: int,
        dim_head: int,
        groups: int,
        eps: float,
        output_scale_factor: float = 1.0,
    ) -> None:
        super().__init__(channels, heads=channels // dim_head, dim_head=dim_head, bias=True)
        self.group_norm = GroupNorm(groups, channels, eps)
        self.output_scale_factor = output_scale_factor

    def forward(self, op, x, context=None):
        tokens = op.Transpose(
            op.Reshape(self.group_norm(op, x), op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1]
        )  # [b, h*w, c]
        out = op.Reshape(op.Transpose(super().forward(op, tokens), perm=[0, 2, 1]), op.Shape(x))
        out = op.Add(out, x)
        if self.output_scale_factor != 1:
            out = op.Div(out, op.CastLike(self.output_scale_factor, out))
        return out


class DownBlock2D(nn.Module):
    """``num_layers`` resnets, then an optional ``Downsample2D``; returns the output and every state.

    The states (each resnet's output, then the downsampled one) are the UNet's skips;
    the VAE encoder's ``DownEncoderBlock2D`` is this block with no time embedding.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        num_layers: int,
        temb_channels: int | None,
        groups: int,
        eps: float,
        act_fn: str,
        add_downsample: bool,
        downsample_padding: int = 1,
        time_embedding_norm: str = "default",
    ) -> None:
        super().__init__()
        self.resnets = nn.ModuleList(
            [
                ResnetBlock2D(
                    in_channels if i == 0 else out_channels,
                    out_channels,
                    temb_channels,
                    groups,
                    eps,
                    act_fn,
                    time_embedding_norm,
                )
                for i in range(num_layers)
            ]
        )
        self.downsamplers = (
            nn.ModuleList([Downsample2D(out_channels, out_channels, downsample_padding)])
            if add_downsample
            else None
        )

    def layer(self, op, i: int, x, temb, context):
        """Layer ``i``: its resnet (attention blocks add their transformer after it)."""
        return self.resnets[i](op, x, temb)

    def forward(self, op, x, temb=None, context=None, residual=None):
        """``residual`` (a T2I-Adapter's feature) is added to the last layer's output, before
        the downsampler, as diffusers' cross-attention blocks add ``additional_residuals``."""
        states = []
        for i in range(len(self.resnets)):
            x = self.layer(op, i, x, temb, context)
            if residual is not None and i == len(self.resnets) - 1:
                x = op.Add(x, residual)
            states.append(x)
        if self.downsamplers is not None:
            x = self.downsamplers[0](op, x)
            states.append(x)
        return x, states


class UpBlock2D(nn.Module):
    """Resnets (each after concatenating the next skip, when skips are given), then an optional ``Upsample2D``.

    ``resnet_in_channels`` lists each resnet's input width (skip included); the VAE
    decoder's ``UpDecoderBlock2D`` is this block with no skips and no time embedding.
    """

    def __init__(
        self,
        resnet_in_channels: list[int],
        out_channels: int,
        temb_channels: int | None,
        groups: int,
        eps: float,
        act_fn: str,
        add_upsample: bool,
        time_embedding_norm: str = "default",
    ) -> None:
        super().__init__()
        self.resnets = nn.ModuleList(
            [
                ResnetBlock2D(
                    c, out_channels, temb_channels, groups, eps, act_fn, time_embedding_norm
                )
                for c in resnet_in_channels
            ]
        )
        self.upsamplers = nn.ModuleList([Upsample2D(out_channels)]) if add_upsample else None

    def layer(self, op, i: int, x, temb, context):
        """Layer ``i``: its resnet (attention blocks add their transformer after it)."""
        return self.resnets[i](op, x, temb)

    def forward(self, op, x, temb=None, context=None, skips=None, upsample_like=None):
        """``skips`` are popped from the end, one per resnet; ``upsample_like`` sets the upsampled size."""
        skips = list(skips or [])
        for i in range(len(self.resnets)):
            if skips:
                x = op.Concat(x, skips.pop(), axis=1)
            x = self.layer(op, i, x, temb, context)
        if self.upsamplers is not None:
            x = self.upsamplers[0](op, x, upsample_like)
        return x


class UNetMidBlock2D(nn.Module):
    """A resnet, then ``num_layers`` (attention, resnet) pairs; attention over pixels when ``add_attention``."""

    def __init__(
        self,
        channels: int,
        temb_channels: int | None,
        groups: int,
        eps: float,
        act_fn: str,
        num_layers: int = 1,
        add_attention: bool = True,
        attention_head_dim: int | None = None,
        output_scale_factor: float = 1.0,
        time_embedding_norm: str = "default",
    ) -> None:
        super().__init__()
        self.resnets = nn.ModuleList(
            [
                ResnetBlock2D(
                    channels,
                    channels,
                    temb_channels,
                    groups,
                    eps,
                    act_fn,
                    time_embedding_norm,
                    output_scale_factor,
                )
                for _ in range(num_layers + 1)
            ]
        )
        head_dim = attention_head_dim or channels
        self.attentions = nn.ModuleList(
            [
                AttentionBlock(channels, head_dim, groups, eps, output_scale_factor)
                for _ in range(num_layers if add_attention else 0)
            ]
        )

    def forward(self, op, x, temb=None, context=None):
        x = self.resnets[0](op, x, temb)
        for i, resnet in enumerate(self.resnets[1:]):
            if len(self.attentions):
                x = self.attentions[i](op, x, context)
            x = resnet(op, x, temb)
        return x
