"""MobileViT: a MobileNetV2-style stem and inverted residuals, then MobileViT blocks (a local
conv, the map unfolded into patches for a ViT encoder, folded back, fused with the block input).

A feature map that is not a multiple of ``patch_size`` is resized (bilinear, half-pixel, as
``interpolate(align_corners=False)``) up to one before unfolding and back after folding.
The module tree follows ``MobileViTFor*`` checkpoints (``mobilevit.conv_stem.convolution``,
``mobilevit.encoder.layer.2.transformer.layer.0.attention.attention.query``...,
``classifier``); ``last_hidden_state`` is ``[batch, C, h, w]`` after ``conv_1x1_exp``,
``pooler_output`` its spatial mean ``[batch, C]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from onnxscript import nn

from mobius.components import LayerNorm, Linear
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig
from mobius_vision.models._conv import (
    BatchNorm2d,
    Conv2d,
    ConvNetForImageClassification,
    Sequential,
    activation,
    same_size,
)
from mobius_vision.models.mobilenet_v2 import make_divisible
from mobius_vision.models.vit import ViTConfig, ViTLayer


@dataclass
class MobileViTBaseConfig(VisionConfig):
    """What MobileViT and MobileViTV2 share: the conv layers, the patches, the strides."""

    patch_size: int = 2
    expand_ratio: float = 4.0
    hidden_act: str = "silu"
    conv_kernel_size: int = 3
    output_stride: int = 32
    layer_norm_eps: float = 1e-5

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        base = super().hf_fields(hf_config)
        if any(a.endswith("ForSemanticSegmentation") for a in base["architectures"]):
            raise ConfigError(
                f"{hf_config.model_type}: a semantic-segmentation checkpoint is not supported; "
                "only the backbone and image classification"
            )
        if not isinstance(hf_config.patch_size, int):
            raise ConfigError(f"{hf_config.model_type}: patch_size must be one int")
        names = [f.name for f in fields(cls) if f.name not in VisionConfig.__dataclass_fields__]
        values = {n: getattr(hf_config, n) for n in names}
        values = {n: tuple(v) if isinstance(v, list | tuple) else v for n, v in values.items()}
        return dict(base, **values)

    def dilations(self) -> tuple[int, int]:
        """The dilation of layers 4 and 5: ``output_stride`` 8 or 16 dilates instead of striding."""
        four = 2 if self.output_stride == 8 else 1
        five = four * (2 if self.output_stride in (8, 16) else 1)
        return four, five

    def layer_sizes(self) -> list[tuple[int, int]]:
        """The feature-map size ``(h, w)`` after the stem and each of the five encoder layers."""
        strides = [2, 1, 2, 2, *(1 if d > 1 else 2 for d in self.dilations())]
        (h, w), sizes = self.image_size, []
        for stride in strides:
            h, w = same_size(h, stride), same_size(w, stride)
            sizes.append((h, w))
        return sizes


@dataclass
class MobileViTConfig(MobileViTBaseConfig):
    hidden_sizes: tuple[int, ...] = (144, 192, 240)
    neck_hidden_sizes: tuple[int, ...] = (16, 32, 64, 96, 128, 160, 640)
    num_attention_heads: int = 4
    mlp_ratio: float = 2.0
    qkv_bias: bool = True

    #: Inverted residuals of the two MobileNet layers.
    mobilenet_depths: ClassVar[tuple[int, int]] = (1, 3)

    @property
    def widths(self) -> tuple[int, ...]:
        """The output width of the stem, of the five encoder layers and of ``conv_1x1_exp``."""
        return self.neck_hidden_sizes

    def attention_blocks(self) -> list[tuple[int, int]]:
        """Each MobileViT block's transformer width and depth."""
        return list(zip(self.hidden_sizes, (2, 4, 3), strict=True))


class MobileViTConvLayer(nn.Module):
    """Conv (``(k - 1) // 2 * dilation`` padding), optional BatchNorm, optional activation."""

    def __init__(
        self,
        config,
        in_ch: int,
        out_ch: int,
        kernel_size: int,
        stride: int = 1,
        groups: int = 1,
        bias: bool = False,
        dilation: int = 1,
        norm: bool = True,
        act: bool = True,
    ) -> None:
        super().__init__()
        pad = (kernel_size - 1) // 2 * dilation
        self.convolution = Conv2d(
            in_ch, out_ch, kernel_size, stride, pad, dilation, groups, bias=bias
        )
        self.normalization = BatchNorm2d(out_ch) if norm else None
        self.act = activation(config.hidden_act if act else None)

    def forward(self, op, x):
        x = self.convolution(op, x)
        if self.normalization is not None:
            x = self.normalization(op, x)
        return self.act(op, x)


class MobileViTInvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand, depthwise 3x3, 1x1 reduce; a residual when shapes keep."""

    def __init__(self, config, in_ch: int, out_ch: int, stride: int, dilation: int = 1) -> None:
        super().__init__()
        expanded = make_divisible(int(round(in_ch * config.expand_ratio)), 8)
        self.use_residual = stride == 1 and in_ch == out_ch
        self.expand_1x1 = MobileViTConvLayer(config, in_ch, expanded, 1)
        self.conv_3x3 = MobileViTConvLayer(
            config, expanded, expanded, 3, stride, groups=expanded, dilation=dilation
        )
        self.reduce_1x1 = MobileViTConvLayer(config, expanded, out_ch, 1, act=False)

    def forward(self, op, x):
        y = self.reduce_1x1(op, self.conv_3x3(op, self.expand_1x1(op, x)))
        return op.Add(x, y) if self.use_residual else y


class MobileViTMobileNetLayer(nn.Module):
    def __init__(self, config, in_ch: int, out_ch: int, stride: int, depth: int) -> None:
        super().__init__()
        first = MobileViTInvertedResidual(config, in_ch, out_ch, stride)
        rest = [MobileViTInvertedResidual(config, out_ch, out_ch, 1) for _ in range(depth - 1)]
        self.layer = Sequential([first, *rest])

    def forward(self, op, x):
        return self.layer(op, x)


def downsampling_layer(config, in_ch: int, out_ch: int, dilation: int) -> nn.Module:
    """The strided inverted residual opening a MobileViT block (dilated: stride 1, half dilation)."""
    stride = 2 if dilation == 1 else 1
    return MobileViTInvertedResidual(config, in_ch, out_ch, stride, max(dilation // 2, 1))


def resize(op, x, size: tuple[int, int]):
    """``interpolate(x, size, mode="bilinear", align_corners=False)`` over the spatial axes."""
    sizes = op.Constant(value_ints=list(size))
    return op.Resize(
        x,
        None,
        None,
        sizes,
        axes=[2, 3],
        mode="linear",
        coordinate_transformation_mode="half_pixel",
    )


class MobileViTTransformer(nn.Module):
    def __init__(self, config: MobileViTConfig, hidden_size: int, depth: int) -> None:
        super().__init__()
        vit = ViTConfig(
            model_type=config.model_type,
            image_size=config.image_size,
            hidden_size=hidden_size,
            intermediate_size=int(hidden_size * config.mlp_ratio),
            num_attention_heads=config.num_attention_heads,
            hidden_act=config.hidden_act,
            layer_norm_eps=config.layer_norm_eps,
            qkv_bias=config.qkv_bias,
        )
        self.layer = Sequential([ViTLayer(vit) for _ in range(depth)])

    def forward(self, op, x):
        return self.layer(op, x)


class MobileViTLayer(nn.Module):
    """Downsample, local conv kxk and 1x1, patches through a transformer, fold, project, fuse."""

    def __init__(
        self,
        config: MobileViTConfig,
        in_ch: int,
        out_ch: int,
        hidden_size: int,
        depth: int,
        dilation: int,
        size: tuple[int, int],
    ) -> None:
        super().__init__()
        k = config.conv_kernel_size
        self.downsampling_layer = downsampling_layer(config, in_ch, out_ch, dilation)
        self.conv_kxk = MobileViTConvLayer(config, out_ch, out_ch, k)
        self.conv_1x1 = MobileViTConvLayer(config, out_ch, hidden_size, 1, norm=False, act=False)
        self.transformer = MobileViTTransformer(config, hidden_size, depth)
        self.layernorm = LayerNorm(hidden_size, config.layer_norm_eps)
        self.conv_projection = MobileViTConvLayer(config, hidden_size, out_ch, 1)
        self.fusion = MobileViTConvLayer(config, 2 * out_ch, out_ch, k)
        p = self.patch = config.patch_size
        self.size = size
        self.padded = tuple(math.ceil(s / p) * p for s in size)
        self.hidden_size = hidden_size

    def unfold(self, op, x):
        """``[batch, C, H, W]`` -> ``[batch * p * p, patches, C]``: pixel ``(a, d)`` of every patch."""
        if self.padded != self.size:
            x = resize(op, x, self.padded)
        p, (h, w), c = self.patch, self.padded, self.hidden_size
        x = op.Reshape(x, op.Constant(value_ints=[-1, c, h // p, p, w // p, p]))
        x = op.Transpose(x, perm=[0, 3, 5, 2, 4, 1])  # [batch, p, p, h/p, w/p, C]
        return op.Reshape(x, op.Constant(value_ints=[-1, (h // p) * (w // p), c]))

    def fold(self, op, x):
        """The inverse of :meth:`unfold`, resized back to the block's map size."""
        p, (h, w), c = self.patch, self.padded, self.hidden_size
        x = op.Reshape(x, op.Constant(value_ints=[-1, p, p, h // p, w // p, c]))
        x = op.Transpose(x, perm=[0, 5, 3, 1, 4, 2])  # [batch, C, h/p, p, w/p, p]
        x = op.Reshape(x, op.Constant(value_ints=[-1, c, h, w]))
        return resize(op, x, self.size) if self.padded != self.size else x

    def forward(self, op, x):
        x = self.downsampling_layer(op, x)
        y = self.conv_1x1(op, self.conv_kxk(op, x))  # [batch, hidden, h, w]
        y = self.layernorm(op, self.transformer(op, self.unfold(op, y)))
        y = self.conv_projection(op, self.fold(op, y))  # [batch, C, h, w]
        return self.fusion(op, op.Concat(x, y, axis=1))


class MobileViTEncoder(nn.Module):
    """Two MobileNet layers, then three blocks of the variant's ``block_class``."""

    block_class = MobileViTLayer

    def __init__(self, config) -> None:
        super().__init__()
        widths, sizes = config.widths, config.layer_sizes()
        dilations = (1, *config.dilations())
        first, second = config.mobilenet_depths
        self.layer = Sequential(
            [
                MobileViTMobileNetLayer(config, widths[0], widths[1], 1, first),
                MobileViTMobileNetLayer(config, widths[1], widths[2], 2, second),
            ]
            + [
                self.block_class(
                    config, widths[i + 2], widths[i + 3], dim, depth, dilation, sizes[i + 3]
                )
                for i, ((dim, depth), dilation) in enumerate(
                    zip(config.attention_blocks(), dilations, strict=True)
                )
            ]
        )

    def forward(self, op, x):
        return self.layer(op, x)


class MobileViTModel(nn.Module):
    """The stem, the encoder and ``conv_1x1_exp``; ``pooler_output`` is the spatial mean."""

    encoder_class = MobileViTEncoder

    def __init__(self, config) -> None:
        super().__init__()
        stem = config.widths[0]
        self.conv_stem = MobileViTConvLayer(config, config.num_channels, stem, 3, stride=2)
        self.encoder = self.encoder_class(config)
        self.conv_1x1_exp = self.expansion(config)

    def expansion(self, config) -> nn.Module | None:
        """The 1x1 conv that widens the encoder's output to the last width."""
        return MobileViTConvLayer(config, config.widths[5], config.widths[6], 1)

    def forward(self, op, pixel_values):
        x = self.encoder(op, self.conv_stem(op, pixel_values))
        if self.conv_1x1_exp is not None:
            x = self.conv_1x1_exp(op, x)
        return x, op.ReduceMean(x, op.Constant(value_ints=[2, 3]), keepdims=0)


class MobileViTForImageClassification(ConvNetForImageClassification):
    """The backbone and, with ``--head image-classification``, a linear classifier on the mean."""

    config_class = MobileViTConfig
    model_class = MobileViTModel
    base_model_prefix = "mobilevit"

    def make_classifier(self, config) -> nn.Module:
        return Linear(config.widths[-1], config.num_labels, bias=True)

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        h, w = c.layer_sizes()[-1]
        return {
            "last_hidden_state": ["batch", c.widths[-1], h, w],
            "pooler_output": ["batch", c.widths[-1]],
            "logits": ["batch", c.num_labels],
        }


MODEL_TYPES = {"mobilevit": MobileViTForImageClassification}
