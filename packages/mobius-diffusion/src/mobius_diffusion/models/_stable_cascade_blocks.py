"""The blocks of Stable Cascade's UNet (and Würstchen's Paella VQGAN), over ``[batch, channels, h, w]``.

ConvNeXt-style residual blocks (depthwise conv, LayerNorm over the channels, an MLP
with a global response norm), timestep blocks (a scale and shift from each
conditioning's embedding), attention blocks (the pixels attend over themselves and
the mapped CLIP tokens), the strided resamplers, and the conv layers torch has and
mobius-core has not (``ConvTranspose2d``). Submodules carry diffusers' names; an
``nn.Sequential``'s parameterless positions are empty modules, so ``channelwise.4``
is still the fifth.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Conv2d, Linear
from mobius_diffusion.models._attention import Attention
from mobius_diffusion.models._dit_blocks import WeightlessLayerNorm

#: Every LayerNorm of the family: no affine, eps 1e-6 (fixed in diffusers' code).
EPS = 1e-6

NCHW_TO_NHWC, NHWC_TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


class ChannelLayerNorm(WeightlessLayerNorm):
    """``SDCascadeLayerNorm``: a weightless LayerNorm over the channels of each pixel."""

    def forward(self, op, x):
        nhwc = op.Transpose(x, perm=NCHW_TO_NHWC)
        return op.Transpose(super().forward(op, nhwc), perm=NHWC_TO_NCHW)


class ConvTranspose2d(nn.Module):
    """``torch.nn.ConvTranspose2d``: ``weight [in, out, k, k]``, symmetric ``padding``."""

    def __init__(
        self, in_channels: int, out_channels: int, kernel_size: int, stride: int, padding: int = 0
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter([in_channels, out_channels, kernel_size, kernel_size])
        self.bias = nn.Parameter([out_channels])
        self.attrs = dict(kernel_shape=[kernel_size] * 2, strides=[stride] * 2, pads=[padding] * 4)

    def forward(self, op, x):
        return op.ConvTranspose(x, self.weight, self.bias, **self.attrs)


def resize_bilinear(op, x, sizes_hw):
    """``F.interpolate(x, size, mode="bilinear", align_corners=True)``; ``sizes_hw`` int64 [2]."""
    sizes = op.Concat(op.Shape(x, start=0, end=2), sizes_hw, axis=0)
    return op.Resize(
        x, None, None, sizes, mode="linear", coordinate_transformation_mode="align_corners"
    )


class GlobalResponseNorm(nn.Module):
    """ConvNeXt-V2's GRN over NHWC: each channel's L2 norm over the pixels, relative to the
    channels' mean, rescales it; ``gamma``/``beta`` are ``[1, 1, 1, dim]``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter([1, 1, 1, dim])
        self.beta = nn.Parameter([1, 1, 1, dim])

    def forward(self, op, x):
        norm = op.ReduceL2(x, op.Constant(value_ints=[1, 2]), keepdims=1)  # [b, 1, 1, c]
        mean = op.ReduceMean(norm, op.Constant(value_ints=[-1]), keepdims=1)
        scale = op.Div(norm, op.Add(mean, op.CastLike(EPS, x)))
        return op.Add(op.Add(op.Mul(self.gamma, op.Mul(x, scale)), self.beta), x)


class SDCascadeResBlock(nn.Module):
    """``x + channelwise(norm(depthwise(x)) | skip)``: the MLP (``channelwise.0`` / ``.2`` GRN /
    ``.4``) runs over NHWC; the skip (``c_skip`` channels) joins after the norm."""

    def __init__(self, c: int, c_skip: int = 0, kernel_size: int = 3) -> None:
        super().__init__()
        self.depthwise = Conv2d(c, c, kernel_size, padding=kernel_size // 2, groups=c)
        self.norm = WeightlessLayerNorm(c, EPS)  # applied over NHWC here
        self.channelwise = nn.ModuleList(
            [
                Linear(c + c_skip, c * 4, bias=True),
                nn.Module(),  # GELU
                GlobalResponseNorm(c * 4),
                nn.Module(),  # dropout
                Linear(c * 4, c, bias=True),
            ]
        )

    def forward(self, op, x, skip=None):
        h = self.norm(op, op.Transpose(self.depthwise(op, x), perm=NCHW_TO_NHWC))
        if skip is not None:
            h = op.Concat(h, op.Transpose(skip, perm=NCHW_TO_NHWC), axis=-1)
        h = op.Gelu(self.channelwise[0](op, h))
        h = self.channelwise[4](op, self.channelwise[2](op, h))
        return op.Add(op.Transpose(h, perm=NHWC_TO_NCHW), x)


class SDCascadeTimestepBlock(nn.Module):
    """``x * (1 + a) + b``, ``(a, b)`` summed over ``mapper`` (the timestep ratio's embedding)
    and one ``mapper_{name}`` per extra conditioning (``sca``, ``crp``)."""

    def __init__(self, c: int, c_timestep: int, conds: tuple[str, ...]) -> None:
        super().__init__()
        self.mapper = Linear(c_timestep, c * 2, bias=True)
        self.conds = conds
        for name in conds:
            setattr(self, f"mapper_{name}", Linear(c_timestep, c * 2, bias=True))

    def forward(self, op, x, embeddings):
        """``embeddings``: the ratio's, then each conditioning's, ``[batch, c_timestep]``."""
        mappers = [self.mapper] + [getattr(self, f"mapper_{n}") for n in self.conds]
        ab = mappers[0](op, embeddings[0])
        for mapper, emb in zip(mappers[1:], embeddings[1:], strict=True):
            ab = op.Add(ab, mapper(op, emb))
        a, b = op.Split(op.Unsqueeze(ab, [2, 3]), axis=1, num_outputs=2, _outputs=2)
        return op.Add(op.Mul(x, op.Add(a, 1.0)), b)  # a, b [b, c, 1, 1]


class SDCascadeAttnBlock(nn.Module):
    """``x + attention(norm(x), kv)``: ``kv`` is ``kv_mapper.1(silu(clip))``, after the
    normed pixels themselves when ``self_attn``."""

    def __init__(self, c: int, c_cond: int, nhead: int, self_attn: bool) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.norm = ChannelLayerNorm(c, EPS)
        self.attention = Attention(c, heads=nhead, dim_head=c // nhead, bias=True)
        self.kv_mapper = nn.ModuleList([nn.Module(), Linear(c_cond, c, bias=True)])  # SiLU, linear

    def forward(self, op, x, clip):
        kv = self.kv_mapper[1](op, op.Mul(clip, op.Sigmoid(clip)))
        tokens = op.Transpose(
            op.Reshape(self.norm(op, x), op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1]
        )  # [b, h*w, c]
        if self.self_attn:
            kv = op.Concat(tokens, kv, axis=1)
        out = op.Transpose(self.attention(op, tokens, kv), perm=[0, 2, 1])
        return op.Add(x, op.Reshape(out, op.Shape(x)))


class UpDownBlock2d(nn.Module):
    """A 1x1 conv and a bilinear (align-corners) 2x resize, conv first going down; ``blocks.0``
    / ``blocks.1`` as diffusers orders them. ``enabled=False``: the conv alone."""

    def __init__(self, in_channels: int, out_channels: int, mode: str, enabled: bool) -> None:
        super().__init__()
        self.mode, self.enabled = mode, enabled
        conv = Conv2d(in_channels, out_channels, 1)
        self.blocks = nn.ModuleList([nn.Module(), conv] if mode == "up" else [conv, nn.Module()])

    def resize(self, op, x):
        if not self.enabled:
            return x
        hw = op.Shape(x, start=2, end=4)
        two = op.Constant(value_ints=[2])
        return resize_bilinear(op, x, op.Mul(hw, two) if self.mode == "up" else op.Div(hw, two))

    def forward(self, op, x):
        if self.mode == "up":
            return self.blocks[1](op, self.resize(op, x))
        return self.resize(op, self.blocks[0](op, x))


def ratio_embedding(op, ratio, dim: int, freqs) -> ir.Value:
    """Stable Cascade's sinusoid of a timestep ratio ``[batch]``, in float32: ``sin | cos`` of
    ``10000 * ratio * freqs`` (``freqs`` a float32 constant), zero-padded to an odd ``dim``."""
    ratio = op.Cast(ratio, to=ir.DataType.FLOAT)
    args = op.Mul(op.Unsqueeze(op.Mul(ratio, op.Constant(value_float=10000.0)), [1]), freqs)
    emb = op.Concat(op.Sin(args), op.Cos(args), axis=1)
    return op.Pad(emb, op.Constant(value_ints=[0, 0, 0, 1])) if dim % 2 else emb
