"""HGNetV2: a two-branch stem, stages of HG blocks (stacked convs whose outputs are all
concatenated, then a 1x1 squeeze and a 1x1 excitation), global average pool.

Each conv is Conv (``(k - 1) // 2`` padding, no bias), BatchNorm, activation and, with
``use_learnable_affine_block``, a learned scalar ``scale * x + bias`` (``lab``) after every
activated conv. Light blocks replace a kxk conv by a 1x1 conv and a depthwise kxk conv.
Only the stem uses ``hidden_act``; the blocks use ReLU, as transformers does.

The module tree follows ``HGNetV2ForImageClassification`` checkpoints, which have no base
prefix (``embedder.stem2a.convolution``, ``encoder.stages.1.blocks.0.layers.0.conv2.lab``,
``encoder.stages.0.blocks.0.aggregation.1``, ``fc``); ``HGNetV2Backbone`` checkpoints share
the layout. ``last_hidden_state`` is the last stage's ``[batch, C, h, w]``; transformers has
no pooled output outside the classifier, so none is given.

:class:`HGNetV2Backbone` is transformers' ``HGNetV2Backbone`` under a dense head (D-FINE's
``backbone_config``): the stem's and stages' maps ``out_features`` names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_vision.config import VisionConfig
from mobius_vision.models._backbone import staged_feature_maps
from mobius_vision.models._backbone_config import out_features, stage_names
from mobius_vision.models._conv import BATCHNORM_COUNTERS, BatchNorm2d, Conv2d, activation


def _square_stride(stride) -> int:
    if isinstance(stride, int):
        return stride
    if len(set(stride)) == 1:
        return int(stride[0])
    raise ConfigError(f"hgnet_v2: a non-square stride {stride} is not supported")


def _conv_size(size: int, kernel: int, stride: int) -> int:
    return (size + 2 * ((kernel - 1) // 2) - kernel) // stride + 1


@dataclass
class HGNetV2Config(VisionConfig):
    hidden_sizes: tuple[int, ...] = (256, 512, 1024, 2048)
    hidden_act: str = "relu"
    stem_channels: tuple[int, ...] = (3, 32, 48)
    stem_strides: tuple[int, ...] = (2, 1, 1, 2, 1)
    stage_in_channels: tuple[int, ...] = (48, 128, 512, 1024)
    stage_mid_channels: tuple[int, ...] = (48, 96, 192, 384)
    stage_out_channels: tuple[int, ...] = (128, 512, 1024, 2048)
    stage_num_blocks: tuple[int, ...] = (1, 1, 3, 1)
    stage_downsample: tuple[bool, ...] = (False, True, True, True)
    stage_downsample_strides: tuple[int, ...] = (2, 2, 2, 2)
    stage_light_block: tuple[bool, ...] = (False, False, True, True)
    stage_kernel_size: tuple[int, ...] = (3, 3, 5, 5)
    stage_numb_of_layers: tuple[int, ...] = (6, 6, 6, 6)
    use_learnable_affine_block: bool = False

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        names = [f for f in cls.__dataclass_fields__ if f not in VisionConfig.__dataclass_fields__]
        fields = {n: getattr(hf_config, n) for n in names}
        fields = {k: tuple(v) if isinstance(v, list | tuple) else v for k, v in fields.items()}
        for key in ("stem_strides", "stage_downsample_strides"):
            fields[key] = tuple(_square_stride(s) for s in fields[key])
        if any(k % 2 == 0 for k in fields["stage_kernel_size"]):
            raise ConfigError("hgnet_v2: an even stage_kernel_size changes the map size per layer")
        return dict(super().hf_fields(hf_config), **fields)


class HGNetV2LearnableAffineBlock(nn.Module):
    """``scale * x + bias`` with one learned scalar each."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter([1])
        self.bias = nn.Parameter([1])

    def forward(self, op, x):
        return op.Add(op.Mul(x, self.scale), self.bias)


class HGNetV2ConvLayer(nn.Module):
    """Conv (no bias), BatchNorm, activation, and the affine block where there is an activation."""

    def __init__(
        self, in_ch, out_ch, kernel_size, stride=1, groups=1, act: str | None = "relu", lab=False
    ) -> None:
        super().__init__()
        pad = (kernel_size - 1) // 2
        self.convolution = Conv2d(
            in_ch, out_ch, kernel_size, stride, pad, groups=groups, bias=False
        )
        self.normalization = BatchNorm2d(out_ch)
        self.act = activation(act)
        self.lab = HGNetV2LearnableAffineBlock() if act and lab else None

    def forward(self, op, x):
        x = self.act(op, self.normalization(op, self.convolution(op, x)))
        return x if self.lab is None else self.lab(op, x)


class HGNetV2ConvLayerLight(nn.Module):
    """A 1x1 conv with no activation, then a depthwise kxk conv."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int, lab: bool) -> None:
        super().__init__()
        self.conv1 = HGNetV2ConvLayer(in_ch, out_ch, 1, act=None, lab=lab)
        self.conv2 = HGNetV2ConvLayer(out_ch, out_ch, kernel_size, groups=out_ch, lab=lab)

    def forward(self, op, x):
        return self.conv2(op, self.conv1(op, x))


def _pad_bottom_right(op, x):
    return op.Pad(x, op.Constant(value_ints=[0, 0, 0, 0, 0, 0, 1, 1]))


class HGNetV2Embeddings(nn.Module):
    """stem1; then a max-pool branch and a two-conv branch (both on the padded map), concatenated;
    stem3, stem4."""

    def __init__(self, config: HGNetV2Config) -> None:
        super().__init__()
        (c_in, c, c_out), s = config.stem_channels, config.stem_strides
        act, lab = config.hidden_act, config.use_learnable_affine_block
        self.stem1 = HGNetV2ConvLayer(c_in, c, 3, s[0], act=act, lab=lab)
        self.stem2a = HGNetV2ConvLayer(c, c // 2, 2, s[1], act=act, lab=lab)
        self.stem2b = HGNetV2ConvLayer(c // 2, c, 2, s[2], act=act, lab=lab)
        self.stem3 = HGNetV2ConvLayer(c * 2, c, 3, s[3], act=act, lab=lab)
        self.stem4 = HGNetV2ConvLayer(c, c_out, 1, s[4], act=act, lab=lab)
        self.strides = s

    def out_size(self, size: int) -> int:
        s = self.strides
        size = _conv_size(size, 3, s[0])
        size = _conv_size(size, 3, s[3])  # the concatenation keeps stem1's size
        return _conv_size(size, 1, s[4])

    def forward(self, op, pixel_values):
        x = _pad_bottom_right(op, self.stem1(op, pixel_values))  # [batch, c, h+1, w+1]
        branch = self.stem2b(op, _pad_bottom_right(op, self.stem2a(op, x)))
        pooled = op.MaxPool(x, kernel_shape=[2, 2], strides=[1, 1])  # [batch, c, h, w]
        x = op.Concat(pooled, branch, axis=1)  # [batch, 2c, h, w]
        return self.stem4(op, self.stem3(op, x))


class HGNetV2BasicLayer(nn.Module):
    """``aggregation(concat(x, l1(x), l2(l1(x)), ...))``, plus ``x`` when ``residual``."""

    def __init__(self, in_ch, mid_ch, out_ch, layer_num, kernel_size, residual, light, lab):
        super().__init__()
        self.residual = residual
        self.layers = nn.ModuleList(
            [
                HGNetV2ConvLayerLight(in_ch if i == 0 else mid_ch, mid_ch, kernel_size, lab)
                if light
                else HGNetV2ConvLayer(in_ch if i == 0 else mid_ch, mid_ch, kernel_size, lab=lab)
                for i in range(layer_num)
            ]
        )
        total = in_ch + layer_num * mid_ch
        self.aggregation = nn.ModuleList(
            [
                HGNetV2ConvLayer(total, out_ch // 2, 1, lab=lab),
                HGNetV2ConvLayer(out_ch // 2, out_ch, 1, lab=lab),
            ]
        )

    def forward(self, op, x):
        outputs = [x]
        for layer in self.layers:
            outputs.append(layer(op, outputs[-1]))
        y = op.Concat(*outputs, axis=1)  # [batch, in + layers * mid, h, w]
        for conv in self.aggregation:
            y = conv(op, y)
        return op.Add(y, x) if self.residual else y


class HGNetV2Stage(nn.Module):
    def __init__(self, config: HGNetV2Config, i: int) -> None:
        super().__init__()
        c = config
        in_ch, mid, out = c.stage_in_channels[i], c.stage_mid_channels[i], c.stage_out_channels[i]
        self.stride = c.stage_downsample_strides[i] if c.stage_downsample[i] else 1
        self.downsample = (
            HGNetV2ConvLayer(in_ch, in_ch, 3, self.stride, groups=in_ch, act=None)
            if c.stage_downsample[i]
            else None
        )
        layers, kernel = c.stage_numb_of_layers[i], c.stage_kernel_size[i]
        light, lab = c.stage_light_block[i], c.use_learnable_affine_block
        self.blocks = nn.ModuleList(
            [
                HGNetV2BasicLayer(out if j else in_ch, mid, out, layers, kernel, j > 0, light, lab)
                for j in range(c.stage_num_blocks[i])
            ]
        )

    def out_size(self, size: int) -> int:
        return size if self.downsample is None else _conv_size(size, 3, self.stride)

    def forward(self, op, x):
        if self.downsample is not None:
            x = self.downsample(op, x)
        for block in self.blocks:
            x = block(op, x)
        return x


class HGNetV2Encoder(nn.Module):
    def __init__(self, config: HGNetV2Config) -> None:
        super().__init__()
        self.stages = nn.ModuleList(
            [HGNetV2Stage(config, i) for i in range(len(config.stage_in_channels))]
        )

    def forward(self, op, x):
        for stage in self.stages:
            x = stage(op, x)
        return x


@dataclass
class HGNetV2BackboneConfig(HGNetV2Config):
    """HGNetV2 as a backbone: the maps it returns, by transformers' stage names."""

    out_features: tuple[str, ...] = ()

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        stages = len(fields["stage_in_channels"])
        return dict(fields, out_features=out_features(hf_config, stages))

    def feature_channels(self) -> list[int]:
        """The channels of each returned map."""
        names = stage_names(len(self.stage_in_channels))
        widths = [self.stem_channels[-1], *self.stage_out_channels]
        channels = dict(zip(names, widths, strict=True))
        return [channels[name] for name in self.out_features]


class HGNetV2Backbone(nn.Module):
    """transformers' ``HGNetV2Backbone``: ``feature_maps``, one per ``out_features`` entry
    (``stem`` is the stem's output, ``stageN`` stage N's)."""

    config_class = HGNetV2BackboneConfig
    #: Checkpoint tensors no graph reads: BatchNorm's step counters.
    ignored = (BATCHNORM_COUNTERS,)

    def __init__(self, config: HGNetV2BackboneConfig) -> None:
        super().__init__()
        self.config = config
        self.embedder = HGNetV2Embeddings(config)
        self.encoder = HGNetV2Encoder(config)

    def forward(self, op, pixel_values) -> list:
        return staged_feature_maps(op, self, pixel_values, self.config.out_features)


class HGNetV2ForImageClassification(Model):
    """The backbone and, with ``--head image-classification``, ``fc`` on the average pool."""

    config_class = HGNetV2Config
    task = "image-classification"
    #: What a dense head (D-FINE) puts under itself (:mod:`._backbone`).
    backbone_class = HGNetV2Backbone

    def __init__(self, config: HGNetV2Config) -> None:
        super().__init__()
        self.config = config
        self.embedder = HGNetV2Embeddings(config)
        self.encoder = HGNetV2Encoder(config)
        classify = config.head == "image-classification"
        self.fc = (
            Linear(config.hidden_sizes[-1], config.num_labels, bias=True) if classify else None
        )

    def output_shapes(self) -> dict[str, list]:
        h, w = (self.embedder.out_size(n) for n in self.config.image_size)
        for stage in self.encoder.stages:
            h, w = stage.out_size(h), stage.out_size(w)
        return {
            "last_hidden_state": ["batch", self.config.stage_out_channels[-1], h, w],
            "logits": ["batch", self.config.num_labels],
        }

    def forward(self, op, pixel_values):
        hidden = self.encoder(op, self.embedder(op, pixel_values))
        outputs = {"last_hidden_state": hidden}
        if self.fc is not None:
            pooled = op.Flatten(op.GlobalAveragePool(hidden), axis=1)  # [batch, C]
            outputs["logits"] = self.fc(op, pooled)
        return outputs

    @property
    def ignored(self) -> tuple[str, ...]:
        """BatchNorm counters and, without the head, the classifier."""
        return (BATCHNORM_COUNTERS,) + (() if self.fc is not None else ("fc.*",))


MODEL_TYPES = {"hgnet_v2": HGNetV2ForImageClassification}
