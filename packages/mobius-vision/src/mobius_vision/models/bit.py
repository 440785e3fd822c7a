"""BiT (Big Transfer): a ResNet v2 with weight-standardized convolutions and GroupNorm.

Each conv standardises its weight per output channel in the graph (``(w - mean) / sqrt(var +
1e-8)``, as transformers does in every forward), so the checkpoint's weights load as they
are. ``layer_type`` picks pre-activation (v2) or plain (v1.5) bottlenecks; ``global_padding``
``"SAME"`` pads strided convs as TensorFlow does (ONNX ``SAME_UPPER``), and
``embedding_dynamic_padding`` zero-pads the stem's max pool the same way. The module tree
follows ``BitFor*`` checkpoints (``bit.embedder.convolution``,
``bit.encoder.stages.0.layers.0.conv1``..., ``classifier.1``); ``last_hidden_state`` is
``[batch, C, h, w]`` and ``pooler_output`` ``[batch, C, 1, 1]``, as transformers returns them.
As a dense backbone (:class:`BitBackbone`, DPT-Hybrid's stem) it returns the stages' maps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import module_scope
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig
from mobius_vision.models._backbone import staged_feature_maps
from mobius_vision.models._backbone_config import out_features, require_backbone_type
from mobius_vision.models._conv import (
    Conv2d,
    ConvNetForImageClassification,
    Sequential,
    activation,
    global_average_pool,
    same_size,
)
from mobius_vision.models.mobilenet_v2 import make_divisible


@dataclass
class BitConfig(VisionConfig):
    embedding_size: int = 64
    hidden_sizes: tuple[int, ...] = (256, 512, 1024, 2048)
    depths: tuple[int, ...] = (3, 4, 6, 3)
    layer_type: str = "preactivation"
    hidden_act: str = "relu"
    global_padding: str | None = None
    num_groups: int = 32
    embedding_dynamic_padding: bool = False
    output_stride: int = 32
    width_factor: int = 1

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        names = [f for f in cls.__dataclass_fields__ if f not in VisionConfig.__dataclass_fields__]
        values = {n: getattr(hf_config, n) for n in names}
        padding = values["global_padding"] = (values["global_padding"] or "").upper() or None
        if padding not in (None, "SAME"):
            raise ConfigError(
                f"bit global_padding {padding!r} is not supported (None or 'SAME'); transformers' "
                "own BiT cannot run 'VALID' either: its 3x3 convs shrink the map under the residual"
            )
        if values["layer_type"] not in ("preactivation", "bottleneck"):
            raise ConfigError(f"bit layer_type {values['layer_type']!r} is unknown")
        values["hidden_sizes"], values["depths"] = (
            tuple(values["hidden_sizes"]),
            tuple(values["depths"]),
        )
        return dict(super().hf_fields(hf_config), **values)

    def padding(self, kernel_size: int, stride: int = 1, dilation: int = 1) -> int | str:
        """transformers' ``get_padding_value``: symmetric, or TF SAME where it depends on the size."""
        span = dilation * (kernel_size - 1)
        if self.global_padding == "SAME" and (stride > 1 or span % 2):
            return "same"
        return (stride - 1 + span) // 2

    def stages(self) -> list[tuple[int, int, int, int]]:
        """``(in, out, stride, dilation)`` of each stage; past ``output_stride`` it dilates.
        A stage is a ``depths`` entry: transformers zips them with ``hidden_sizes``, so extra
        widths (DPT-Hybrid's config lists 4 for its 3 stages) are unused."""
        current, dilation, stages, in_ch = 4, 1, [], self.embedding_size
        for i, size in enumerate(self.hidden_sizes[: len(self.depths)]):
            out, stride = make_divisible(size * self.width_factor), 1 if i == 0 else 2
            if current >= self.output_stride:
                dilation, stride = dilation * stride, 1
            stages.append((in_ch, out, stride, dilation))
            current, in_ch = current * stride, out
        return stages

    def stem_size(self) -> tuple[int, int]:
        """The map the stem's max pool sees: the 7x7/2 conv, then 1 pixel of zeros unless SAME."""
        extra = 0 if self.global_padding == "SAME" else 2
        return tuple(same_size(s, 2) + extra for s in self.image_size)

    def output_size(self) -> tuple[int, int]:
        if self.embedding_dynamic_padding:
            sizes = [same_size(s, 2) for s in self.stem_size()]
        else:
            sizes = [(s - 3) // 2 + 1 for s in self.stem_size()]
        for _, _, stride, _ in self.stages():
            sizes = [same_size(s, stride) for s in sizes]
        return tuple(sizes)


class GroupNorm(nn.Module):
    """``torch.nn.GroupNorm`` (per-channel affine) over ``[batch, C, ...]``."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter([num_channels])
        self.bias = nn.Parameter([num_channels])
        self.num_groups, self.eps = num_groups, eps

    def forward(self, op, x):
        return op.GroupNormalization(
            x, self.weight, self.bias, num_groups=self.num_groups, epsilon=self.eps
        )


class BitGroupNormActivation(GroupNorm):
    def __init__(self, config: BitConfig, num_channels: int, act: bool = True) -> None:
        super().__init__(config.num_groups, num_channels)
        self.act = activation(config.hidden_act if act else None)

    def forward(self, op, x):
        return self.act(op, super().forward(op, x))


class WeightStandardizedConv2d(Conv2d):
    """A bias-free conv whose weight is standardised per output channel before use."""

    def __init__(self, in_ch, out_ch, kernel_size, stride=1, padding=0, dilation=1) -> None:
        super().__init__(in_ch, out_ch, kernel_size, stride, padding, dilation, bias=False)
        self.eps = 1e-8

    def forward(self, op, x):
        axes = op.Constant(value_ints=[1, 2, 3])
        centered = op.Sub(self.weight, op.ReduceMean(self.weight, axes, keepdims=1))
        var = op.ReduceMean(op.Mul(centered, centered), axes, keepdims=1)  # biased, as batch_norm
        weight = op.Div(centered, op.Sqrt(op.Add(var, self.eps)))
        return op.Conv(x, weight, **self.attrs)


def std_conv(config: BitConfig, in_ch, out_ch, k, stride=1, dilation=1):
    pad = config.padding(k, stride, dilation)
    return WeightStandardizedConv2d(in_ch, out_ch, k, stride, pad, dilation)


class BitEmbeddings(nn.Module):
    """7x7/2 conv, zero pad (unless SAME), GroupNorm+act (plain bottlenecks only), 3x3/2 max pool."""

    def __init__(self, config: BitConfig) -> None:
        super().__init__()
        self.convolution = std_conv(config, config.num_channels, config.embedding_size, 7, 2)
        preact = config.layer_type == "preactivation"
        self.norm = None if preact else BitGroupNormActivation(config, config.embedding_size)
        self.pad = config.global_padding != "SAME"
        self.pool_pads = None
        if config.embedding_dynamic_padding:  # TF SAME, padded with zeros (not -inf)
            totals = [max((same_size(s, 2) - 1) * 2 + 3 - s, 0) for s in config.stem_size()]
            (top, left), (bottom, right) = [t // 2 for t in totals], [t - t // 2 for t in totals]
            self.pool_pads = [0, 0, top, left, 0, 0, bottom, right]

    def forward(self, op, x):
        x = self.convolution(op, x)
        if self.pad:
            x = op.Pad(x, op.Constant(value_ints=[0, 0, 1, 1, 0, 0, 1, 1]))
        if self.norm is not None:
            x = self.norm(op, x)
        if self.pool_pads is not None:
            x = op.Pad(x, op.Constant(value_ints=self.pool_pads))
        return op.MaxPool(x, kernel_shape=[3, 3], strides=[2, 2])


class BitDownsampleConv(nn.Module):
    def __init__(self, config: BitConfig, in_ch: int, out_ch: int, stride: int, preact: bool):
        super().__init__()
        self.conv = std_conv(config, in_ch, out_ch, 1, stride)
        self.norm = None if preact else BitGroupNormActivation(config, out_ch, act=False)

    def forward(self, op, x):
        x = self.conv(op, x)
        return x if self.norm is None else self.norm(op, x)


class BitPreActivationBottleneckLayer(nn.Module):
    """``x + conv3(gn3(conv2(gn2(conv1(gn1(x))))))``; the shortcut projects ``gn1(x)``.

    transformers gives this layer's 3x3 conv no dilation, whatever the stage's.
    """

    def __init__(self, config, in_ch, out_ch, stride, dilation, first: bool) -> None:
        super().__init__()
        mid = make_divisible(out_ch * 0.25)
        self.downsample = BitDownsampleConv(config, in_ch, out_ch, stride, True) if first else None
        self.norm1 = BitGroupNormActivation(config, in_ch)
        self.conv1 = std_conv(config, in_ch, mid, 1)
        self.norm2 = BitGroupNormActivation(config, mid)
        self.conv2 = std_conv(config, mid, mid, 3, stride)
        self.norm3 = BitGroupNormActivation(config, mid)
        self.conv3 = std_conv(config, mid, out_ch, 1)

    def forward(self, op, x):
        pre = self.norm1(op, x)
        shortcut = x if self.downsample is None else self.downsample(op, pre)
        y = self.conv2(op, self.norm2(op, self.conv1(op, pre)))
        return op.Add(self.conv3(op, self.norm3(op, y)), shortcut)


class BitBottleneckLayer(nn.Module):
    """``act(gn3(conv3(act(gn2(conv2(act(gn1(conv1(x)))))))) + shortcut)``."""

    def __init__(self, config, in_ch, out_ch, stride, dilation, first: bool) -> None:
        super().__init__()
        mid = make_divisible(out_ch * 0.25)
        self.downsample = BitDownsampleConv(config, in_ch, out_ch, stride, False) if first else None
        self.conv1 = std_conv(config, in_ch, mid, 1)
        self.norm1 = BitGroupNormActivation(config, mid)
        self.conv2 = std_conv(config, mid, mid, 3, stride, dilation)
        self.norm2 = BitGroupNormActivation(config, mid)
        self.conv3 = std_conv(config, mid, out_ch, 1)
        self.norm3 = BitGroupNormActivation(config, out_ch, act=False)
        self.act = activation(config.hidden_act)

    def forward(self, op, x):
        shortcut = x if self.downsample is None else self.downsample(op, x)
        y = self.norm2(op, self.conv2(op, self.norm1(op, self.conv1(op, x))))
        return self.act(op, op.Add(self.norm3(op, self.conv3(op, y)), shortcut))


class BitStage(nn.Module):
    def __init__(self, config: BitConfig, in_ch, out_ch, stride, dilation, depth) -> None:
        super().__init__()
        preact = config.layer_type == "preactivation"
        layer = BitPreActivationBottleneckLayer if preact else BitBottleneckLayer
        first_dilation = 1 if dilation in (1, 2) else 2  # the first layer's 3x3, as transformers
        self.layers = Sequential(
            [layer(config, in_ch, out_ch, stride, first_dilation, True)]
            + [layer(config, out_ch, out_ch, 1, dilation, False) for _ in range(depth - 1)]
        )

    def forward(self, op, x):
        return self.layers(op, x)


class BitEncoder(nn.Module):
    def __init__(self, config: BitConfig) -> None:
        super().__init__()
        self.stages = Sequential(
            [
                BitStage(config, *stage, depth)
                for stage, depth in zip(config.stages(), config.depths, strict=True)
            ]
        )

    def forward(self, op, x):
        return self.stages(op, x)


class BitModel(nn.Module):
    def __init__(self, config: BitConfig) -> None:
        super().__init__()
        self.embedder = BitEmbeddings(config)
        self.encoder = BitEncoder(config)
        preact = config.layer_type == "preactivation"
        self.norm = BitGroupNormActivation(config, config.hidden_sizes[-1]) if preact else None

    def forward(self, op, pixel_values):
        x = self.encoder(op, self.embedder(op, pixel_values))
        if self.norm is not None:
            x = self.norm(op, x)
        return x, global_average_pool(op, x)


@dataclass
class BitBackboneConfig(BitConfig):
    """BiT as a backbone: the maps it returns, by transformers' stage names (``stem``,
    ``stage1``...). Its ``image_size`` is the head's: TF SAME pooling pads for it."""

    out_features: tuple[str, ...] = ()

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        require_backbone_type(hf_config, "bit")
        fields = super().hf_fields(hf_config)
        return dict(fields, out_features=out_features(hf_config, len(fields["depths"])))

    def feature_channels(self) -> list[int]:
        """The channels of each returned map."""
        channels = [self.embedding_size, *(out for _, out, _, _ in self.stages())]
        names = ["stem", *(f"stage{i}" for i in range(1, len(channels)))]
        return [dict(zip(names, channels, strict=True))[name] for name in self.out_features]

    def reduction(self) -> int:
        """How many pixels one cell of the last stage's map spans (the stem's 4, then the
        stages' strides)."""
        stride = 4
        for _, _, step, _ in self.stages():
            stride *= step
        return stride


class BitBackbone(nn.Module):
    """transformers' ``BitBackbone``: ``feature_maps``, one per ``out_features`` entry, each a
    stage's output as it is (``bit.embedder``, ``bit.encoder.stages.N`` keys)."""

    config_class = BitBackboneConfig
    #: The pre-activation model's final norm, which the feature maps never pass through.
    ignored = ("bit.norm.*",)
    #: The name the depth heads read the same list under.
    unused = ignored

    def __init__(self, config: BitBackboneConfig) -> None:
        super().__init__()
        self.config = config
        self.bit = BitModel(config)

    def forward(self, op, pixel_values) -> list:
        with module_scope(op, self.bit):
            return staged_feature_maps(op, self.bit, pixel_values, self.config.out_features)


class BitForImageClassification(ConvNetForImageClassification):
    """The backbone and, with ``--head image-classification``, ``classifier.1`` on the pool."""

    config_class = BitConfig
    model_class = BitModel
    base_model_prefix = "bit"
    #: What a dense head (DPT-Hybrid) puts under itself (:mod:`._backbone`).
    backbone_class = BitBackbone

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        width = c.stages()[-1][1]
        return {
            "last_hidden_state": ["batch", width, *c.output_size()],
            "pooler_output": ["batch", width, 1, 1],
            "logits": ["batch", c.num_labels],
        }


MODEL_TYPES = {"bit": BitForImageClassification}
