"""CLAP's patch embeddings: the folded spectrogram's patches, and for fused checkpoints
(``enable_fusion``, laion/clap-htsat-fused) a long clip's crops fused into them.

A fused extractor gives four spectrograms per clip: the whole clip shrunk to the window,
then three crops (front, middle, back) at full resolution; ``is_longer`` says which clips
had crops. The first goes through the usual patch conv (``proj``); the crops through
``mel_conv2d`` (a patch three times wider), side by side along time, zero-padded to the
same width; an attentional feature fusion block (``fusion_model``: a per-position and a
global gate, each ``conv1x1 -> BatchNorm -> ReLU -> conv1x1 -> BatchNorm``) mixes the
two as ``2 * x * gate + 2 * crops * (1 - gate)``. transformers fuses only the clips with
``is_longer``; the graph fuses every clip and keeps the fused tokens where ``is_longer``
(each clip's computation is its own: the BatchNorms use their running statistics).
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components import BatchNorm, Conv2d, LayerNorm


class RectangularConv2d(Conv2d):
    """``Conv2d`` with a ``(height, width)`` kernel and stride, no padding."""

    def __init__(self, in_channels: int, out_channels: int, kernel: tuple[int, int]) -> None:
        super().__init__(in_channels, out_channels, kernel[0])
        self.weight = nn.Parameter([out_channels, in_channels, *kernel])
        self.attrs.update(kernel_shape=list(kernel), strides=list(kernel))


class Relu(nn.Module):
    def forward(self, op, x):
        return op.Relu(x)


class GlobalAveragePool(nn.Module):
    def forward(self, op, x):
        return op.GlobalAveragePool(x)


def sequential(op, layers: nn.ModuleList, x):
    """``torch.nn.Sequential``'s call: the layers in order (named by index, as the checkpoint)."""
    for layer in layers:
        x = layer(op, x)
    return x


def _gate(channels: int, inner: int) -> list[nn.Module]:
    return [
        Conv2d(channels, inner, 1),
        BatchNorm(inner),
        Relu(),
        Conv2d(inner, channels, 1),
        BatchNorm(channels),
    ]


class ClapAudioAFFBlock(nn.Module):
    """Attentional feature fusion: ``2 * x * g + 2 * residual * (1 - g)``, ``g`` a sigmoid gate."""

    def __init__(self, channels: int, ratio: int) -> None:
        super().__init__()
        inner = int(channels // ratio)
        self.local_att = nn.ModuleList(_gate(channels, inner))
        self.global_att = nn.ModuleList([GlobalAveragePool(), *_gate(channels, inner)])

    def forward(self, op, x, residual):
        both = op.Add(x, residual)
        gate = op.Add(sequential(op, self.local_att, both), sequential(op, self.global_att, both))
        gate = op.Sigmoid(gate)
        two = op.CastLike(op.Constant(value_float=2.0), x)
        one = op.CastLike(op.Constant(value_float=1.0), x)
        fused = op.Add(op.Mul(x, gate), op.Mul(residual, op.Sub(one, gate)))
        return op.Mul(two, fused)


class ClapPatchEmbed(nn.Module):
    """``Conv2d(kernel=stride=patch)`` over the folded spectrogram, tokens, then a LayerNorm."""

    def __init__(self, embed_dim: int, patch: int, side: int, layer_norm: bool) -> None:
        super().__init__()
        self.proj = Conv2d(1, embed_dim, patch, stride=patch)
        self.norm = LayerNorm(embed_dim) if layer_norm else None

    def patches(self, op, image, is_longer):
        return self.proj(op, image)

    def forward(self, op, image, is_longer=None):
        """``[batch, channels, side, side]`` -> tokens ``[batch, (side / patch)^2, C]``."""
        x = self.patches(op, image, is_longer)  # [batch, C, h, w]
        x = op.Transpose(op.Reshape(x, op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1])
        return x if self.norm is None else self.norm(op, x)


class ClapFusedPatchEmbed(ClapPatchEmbed):
    """``proj`` over the first spectrogram, fused with ``mel_conv2d`` over the three crops
    where ``is_longer``."""

    def __init__(self, embed_dim: int, patch: int, side: int, layer_norm: bool, ratio: int) -> None:
        super().__init__(embed_dim, patch, side, layer_norm)
        self.mel_conv2d = RectangularConv2d(1, embed_dim, (patch, 3 * patch))
        self.fusion_model = ClapAudioAFFBlock(embed_dim, ratio)
        self.embed_dim, self.side, self.patch = embed_dim, side, patch

    def crops(self, op, image):
        """The three crops' patches side by side along time, zero-padded to the whole's width."""
        c, side, p = self.embed_dim, self.side, self.patch
        crops = op.Reshape(
            op.Slice(image, [1], [4], [1]), op.Constant(value_ints=[-1, 1, side, side])
        )
        x = self.mel_conv2d(op, crops)  # [batch * 3, C, side / p, side / 3p]
        width = side // (3 * p)
        x = op.Reshape(x, op.Constant(value_ints=[-1, 3, c, side // p, width]))
        x = op.Transpose(x, perm=[0, 2, 3, 1, 4])  # each row: crop 1, crop 2, crop 3 in time
        x = op.Reshape(x, op.Constant(value_ints=[-1, c, side // p, 3 * width]))
        pad = side // p - 3 * width
        return op.Pad(x, op.Constant(value_ints=[0, 0, 0, 0, 0, 0, 0, pad])) if pad else x

    def patches(self, op, image, is_longer):
        whole = self.proj(op, op.Slice(image, [0], [1], [1]))
        fused = self.fusion_model(op, whole, self.crops(op, image))
        longer = op.Reshape(
            op.Cast(is_longer, to=ir.DataType.BOOL), op.Constant(value_ints=[-1, 1, 1, 1])
        )
        return op.Where(longer, fused, whole)
