"""GLPN: a hierarchical (SegFormer-style) encoder and a selective-fusion decoder, for depth.

Four stages, each an overlapping strided patch conv and layers of efficient
self-attention (keys and values from a map shrunk by ``sr_ratios``) and a Mix-FFN
(a 3x3 depthwise conv between its linears). The decoder goes from the coarsest
stage's map to the finest, projecting each to ``decoder_hidden_size``, fusing it
with the previous stage's output through a learned two-way attention map, and
doubling its size; the head ends in a sigmoid times ``max_depth``. Every size comes
from the tensors' shapes, so any image whose sides are multiples of 32 runs (what
GLPN's image processor makes). The layer norms are ``nn.LayerNorm``'s default eps
(1e-5): transformers ignores ``layer_norm_eps`` here. Checkpoint keys as
transformers saves them (``glpn.encoder.block.0.0.attention.self.query``,
``decoder.stages.1.fusion.convolutional_layer1.0``, ``head.head.0``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Conv2d, LayerNorm, Linear, bidirectional_attention, get_activation
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_vision.models._conv import BATCHNORM_COUNTERS, Activation, BatchNorm2d, Sequential
from mobius_vision.models._dpt_neck import patches_to_map, resize_to

_EPS = 1e-5  # torch.nn.LayerNorm's default, which every GLPN norm uses


@dataclass
class GlpnConfig:
    model_type: str
    depths: tuple[int, ...]
    sr_ratios: tuple[int, ...]
    hidden_sizes: tuple[int, ...]
    patch_sizes: tuple[int, ...]
    strides: tuple[int, ...]
    num_attention_heads: tuple[int, ...]
    mlp_ratios: tuple[float, ...]
    hidden_act: str
    decoder_hidden_size: int
    max_depth: float
    head_in_index: int
    num_channels: int = 3

    @classmethod
    def from_hf(cls, hf_config: Any) -> GlpnConfig:
        return cls(**cls.hf_fields(hf_config))

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        blocks = hf_config.num_encoder_blocks
        fields = {}
        for name in ("depths", "sr_ratios", "hidden_sizes", "patch_sizes", "strides"):
            values = tuple(getattr(hf_config, name))[:blocks]
            if len(values) != blocks or not all(isinstance(v, int) and v > 0 for v in values):
                raise ConfigError(f"glpn: {name} must be {blocks} positive ints, not {values}")
            fields[name] = values
        heads = tuple(hf_config.num_attention_heads)[:blocks]
        if any(size % head for size, head in zip(fields["hidden_sizes"], heads, strict=True)):
            raise ConfigError("glpn: each hidden size must be a multiple of its head count")
        max_depth = float(hf_config.max_depth)
        if not math.isfinite(max_depth) or max_depth <= 0:
            raise ConfigError(f"glpn: max_depth must be a positive number, not {max_depth}")
        return dict(
            fields,
            model_type=hf_config.model_type,
            num_attention_heads=heads,
            mlp_ratios=tuple(float(r) for r in hf_config.mlp_ratios[:blocks]),
            hidden_act=hf_config.hidden_act,
            decoder_hidden_size=int(hf_config.decoder_hidden_size),
            max_depth=max_depth,
            head_in_index=int(hf_config.head_in_index),
            num_channels=int(hf_config.num_channels),
        )


def flatten_map(op, x):
    """``[batch, channels, h, w]`` -> ``[batch, h * w, channels]`` and the grid ``[h, w]``."""
    grid = op.Shape(x, start=2, end=4)
    shape = op.Concat(op.Shape(x, start=0, end=2), op.Constant(value_ints=[-1]), axis=0)
    return op.Transpose(op.Reshape(x, shape), perm=[0, 2, 1]), grid


class GlpnOverlapPatchEmbeddings(nn.Module):
    def __init__(self, patch: int, stride: int, in_channels: int, hidden: int) -> None:
        super().__init__()
        self.proj = Conv2d(in_channels, hidden, patch, stride=stride, padding=patch // 2)
        self.layer_norm = LayerNorm(hidden, _EPS)

    def forward(self, op, x):
        tokens, grid = flatten_map(op, self.proj(op, x))
        return self.layer_norm(op, tokens), grid


class GlpnEfficientSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, sr_ratio: int) -> None:
        super().__init__()
        self.query = Linear(hidden, hidden, bias=True)
        self.key = Linear(hidden, hidden, bias=True)
        self.value = Linear(hidden, hidden, bias=True)
        self.sr = Conv2d(hidden, hidden, sr_ratio, stride=sr_ratio) if sr_ratio > 1 else None
        self.layer_norm = LayerNorm(hidden, _EPS) if sr_ratio > 1 else None
        self.heads = heads
        self.scale = (hidden // heads) ** -0.5

    def forward(self, op, tokens, grid):
        keys_from = tokens
        if self.sr is not None:  # keys and values from the map shrunk sr_ratio times
            shrunk, _ = flatten_map(op, self.sr(op, patches_to_map(op, tokens, grid)))
            keys_from = self.layer_norm(op, shrunk)
        q, k, v = self.query(op, tokens), self.key(op, keys_from), self.value(op, keys_from)
        return bidirectional_attention(op, q, k, v, None, self.heads, self.scale)


class GlpnDense(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.dense = Linear(hidden, hidden, bias=True)

    def forward(self, op, x):
        return self.dense(op, x)


class GlpnAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, sr_ratio: int) -> None:
        super().__init__()
        self.self = GlpnEfficientSelfAttention(hidden, heads, sr_ratio)
        self.output = GlpnDense(hidden)

    def forward(self, op, tokens, grid):
        return self.output(op, self.self(op, tokens, grid))


class GlpnDepthWiseConv(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.dwconv = Conv2d(channels, channels, 3, padding=1, groups=channels)

    def forward(self, op, tokens, grid):
        return flatten_map(op, self.dwconv(op, patches_to_map(op, tokens, grid)))[0]


class GlpnMixFFN(nn.Module):
    def __init__(self, hidden: int, inner: int, act: str) -> None:
        super().__init__()
        self.dense1 = Linear(hidden, inner, bias=True)
        self.dwconv = GlpnDepthWiseConv(inner)
        self.dense2 = Linear(inner, hidden, bias=True)
        self.act = get_activation(act)

    def forward(self, op, tokens, grid):
        x = self.act(op, self.dwconv(op, self.dense1(op, tokens), grid))
        return self.dense2(op, x)


class GlpnLayer(nn.Module):
    def __init__(self, config: GlpnConfig, stage: int) -> None:
        super().__init__()
        hidden = config.hidden_sizes[stage]
        self.layer_norm_1 = LayerNorm(hidden, _EPS)
        heads, sr_ratio = config.num_attention_heads[stage], config.sr_ratios[stage]
        self.attention = GlpnAttention(hidden, heads, sr_ratio)
        self.layer_norm_2 = LayerNorm(hidden, _EPS)
        inner = int(hidden * config.mlp_ratios[stage])
        self.mlp = GlpnMixFFN(hidden, inner, config.hidden_act)

    def forward(self, op, tokens, grid):
        tokens = op.Add(tokens, self.attention(op, self.layer_norm_1(op, tokens), grid))
        return op.Add(tokens, self.mlp(op, self.layer_norm_2(op, tokens), grid))


class GlpnStage(nn.ModuleList):
    """One stage's layers (``block.{stage}.{layer}``)."""

    def __call__(self, op, tokens, grid):
        return self.forward(op, tokens, grid)

    def forward(self, op, tokens, grid):
        for layer in self:
            tokens = layer(op, tokens, grid)
        return tokens


class GlpnEncoder(nn.Module):
    def __init__(self, config: GlpnConfig) -> None:
        super().__init__()
        ins = (config.num_channels, *config.hidden_sizes[:-1])
        self.patch_embeddings = nn.ModuleList(
            [
                GlpnOverlapPatchEmbeddings(p, s, c, h)
                for p, s, c, h in zip(
                    config.patch_sizes, config.strides, ins, config.hidden_sizes, strict=True
                )
            ]
        )
        self.block = nn.ModuleList(
            [
                GlpnStage([GlpnLayer(config, stage) for _ in range(depth)])
                for stage, depth in enumerate(config.depths)
            ]
        )
        self.layer_norm = nn.ModuleList([LayerNorm(h, _EPS) for h in config.hidden_sizes])

    def forward(self, op, pixel_values) -> list:
        """Each stage's output map ``[batch, hidden, h, w]``, finest first."""
        x, maps = pixel_values, []
        for embed, stage, norm in zip(
            self.patch_embeddings, self.block, self.layer_norm, strict=True
        ):
            tokens, grid = embed(op, x)
            x = patches_to_map(op, norm(op, stage(op, tokens, grid)), grid)
            maps.append(x)
        return maps


class GlpnModel(nn.Module):
    def __init__(self, config: GlpnConfig) -> None:
        super().__init__()
        self.encoder = GlpnEncoder(config)

    def forward(self, op, pixel_values) -> list:
        return self.encoder(op, pixel_values)


def upsample_2x(op, x):
    """``nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)``."""
    size = op.Mul(op.Shape(x, start=2, end=4), op.Constant(value_ints=[2, 2]))
    return resize_to(op, x, size, align_corners=False)


def conv_bn_relu(in_channels: int, out_channels: int) -> Sequential:
    return Sequential(
        [
            Conv2d(in_channels, out_channels, 3, padding=1),
            BatchNorm2d(out_channels),
            Activation("relu"),
        ]
    )


class GlpnSelectiveFeatureFusion(nn.Module):
    """``local * a0 + global * a1``, ``a = sigmoid(convs([local, global]))`` (two channels)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.convolutional_layer1 = conv_bn_relu(2 * channels, channels)
        self.convolutional_layer2 = conv_bn_relu(channels, channels // 2)
        self.convolutional_layer3 = Conv2d(channels // 2, 2, 3, padding=1)

    def forward(self, op, local, global_):
        x = self.convolutional_layer1(op, op.Concat(local, global_, axis=1))
        x = self.convolutional_layer3(op, self.convolutional_layer2(op, x))
        local_weight, global_weight = op.Split(op.Sigmoid(x), axis=1, num_outputs=2, _outputs=2)
        return op.Add(op.Mul(local, local_weight), op.Mul(global_, global_weight))


class GlpnDecoderStage(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, fuses: bool) -> None:
        super().__init__()
        same = in_channels == out_channels
        self.convolution = None if same else Conv2d(in_channels, out_channels, 1)
        self.fusion = GlpnSelectiveFeatureFusion(out_channels) if fuses else None

    def forward(self, op, x, previous=None):
        if self.convolution is not None:
            x = self.convolution(op, x)
        if previous is not None:
            x = self.fusion(op, x, previous)
        return upsample_2x(op, x)


class GlpnDecoder(nn.Module):
    def __init__(self, config: GlpnConfig) -> None:
        super().__init__()
        out = config.decoder_hidden_size
        self.stages = nn.ModuleList(
            [
                GlpnDecoderStage(size, out, fuses=index > 0)
                for index, size in enumerate(config.hidden_sizes[::-1])
            ]
        )

    def forward(self, op, maps: list) -> list:
        """Each stage's output, coarsest first; the last one doubled once more."""
        outputs, x = [], None
        for features, stage in zip(maps[::-1], self.stages, strict=True):
            x = stage(op, features, x)
            outputs.append(x)
        outputs[-1] = upsample_2x(op, outputs[-1])
        return outputs


class GlpnDepthEstimationHead(nn.Module):
    def __init__(self, config: GlpnConfig) -> None:
        super().__init__()
        channels = config.decoder_hidden_size
        self.head = Sequential(
            [
                Conv2d(channels, channels, 3, padding=1),
                Activation("relu"),
                Conv2d(channels, 1, 3, padding=1),
            ]
        )
        self.head_in_index, self.max_depth = config.head_in_index, config.max_depth

    def forward(self, op, outputs: list):
        x = op.Sigmoid(self.head(op, outputs[self.head_in_index]))
        x = op.Mul(x, op.Constant(value_float=self.max_depth))
        return op.Squeeze(x, op.Constant(value_ints=[1]))


class GlpnForDepthEstimation(Model):
    """``pixel_values`` [batch, 3, height, width] -> ``predicted_depth`` [batch, height, width]."""

    config_class = GlpnConfig
    task = "depth-estimation"
    fixed_image_size = None  # any multiple of 32
    ignored = (BATCHNORM_COUNTERS,)

    def __init__(self, config: GlpnConfig) -> None:
        super().__init__()
        self.config = config
        self.glpn = GlpnModel(config)
        self.decoder = GlpnDecoder(config)
        self.head = GlpnDepthEstimationHead(config)

    def output_shapes(self) -> dict[str, list]:
        return {"predicted_depth": ["batch", "depth_height", "depth_width"]}

    def forward(self, op, pixel_values):
        outputs = self.decoder(op, self.glpn(op, pixel_values))
        return {"predicted_depth": self.head(op, outputs)}


MODEL_TYPES = {"glpn": GlpnForDepthEstimation}
