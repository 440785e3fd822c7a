"""The DPT-style neck of the depth families (Depth Anything, DPT): reassemble, then fuse.

Reassembling turns each backbone stage's tokens into a map at its own scale (a 1x1
projection, then a transposed conv up, a strided conv down, or nothing); a 3x3 conv
takes every map to ``fusion_hidden_size``; fusion runs from the coarsest map to the
finest, each layer adding the next map through a residual unit and doubling the
size (``align_corners`` bilinear). Sizes come from the tensors' shapes, so the graph
takes any image size. Module names follow transformers' checkpoint keys
(``neck.reassemble_stage.layers.0.projection``, ``neck.fusion_stage.layers.0.residual_layer1``).
"""

from __future__ import annotations

from typing import Any

from onnxscript import nn

from mobius import registry
from mobius.components import Conv2d
from mobius.errors import ConfigError
from mobius_vision.models._conv import BatchNorm2d


def backbone_config(hf_backbone_config: Any, head: str) -> Any:
    """The normalised config of the backbone under ``head``, read by its registered family's
    ``backbone_class`` (:mod:`mobius_vision.models._backbone`)."""
    if hf_backbone_config is None:
        raise ConfigError(f"{head}: config.json has no backbone_config to build the backbone from")
    model_type = hf_backbone_config.model_type
    backbone_class = getattr(registry.get(model_type).module_class(), "backbone_class", None)
    if backbone_class is None:
        raise ConfigError(f"{head}: mobius has no {model_type} backbone to put under its head")
    return backbone_class.config_class.from_hf(hf_backbone_config)


def resize_to(op, x, spatial, align_corners: bool):
    """``interpolate(x, size=spatial, mode="bilinear")``; ``spatial`` is an int64 ``[2]``."""
    sizes = op.Concat(op.Shape(x, start=0, end=2), spatial, axis=0)
    mode = "align_corners" if align_corners else "half_pixel"
    return op.Resize(x, None, None, sizes, mode="linear", coordinate_transformation_mode=mode)


def patches_to_map(op, patches, grid):
    """``[batch, patches, hidden]`` -> ``[batch, hidden, rows, cols]``; ``grid`` is int64 ``[2]``."""
    patches = op.Transpose(patches, perm=[0, 2, 1])
    return op.Reshape(patches, op.Concat(op.Shape(patches, start=0, end=2), grid, axis=0))


def drop_class_token(op, tokens):
    """``[batch, 1 + patches, hidden]`` -> ``[batch, patches, hidden]``."""
    return op.Slice(tokens, [1], [2**62], [1])


class ConvTranspose2d(nn.Module):
    """``torch.nn.ConvTranspose2d`` with ``kernel_size == stride`` and no padding
    (``out_channels`` defaults to ``channels``)."""

    def __init__(self, channels: int, factor: int, out_channels: int | None = None) -> None:
        super().__init__()
        out = channels if out_channels is None else out_channels
        self.weight = nn.Parameter([channels, out, factor, factor])
        self.bias = nn.Parameter([out])
        self.factor = factor

    def forward(self, op, x):
        f = self.factor
        return op.ConvTranspose(x, self.weight, self.bias, kernel_shape=[f, f], strides=[f, f])


class ReassembleLayer(nn.Module):
    """A 1x1 projection to ``channels``, then resized by ``factor`` (>1 up, <1 down)."""

    def __init__(self, in_channels: int, channels: int, factor: float) -> None:
        super().__init__()
        self.projection = Conv2d(in_channels, channels, 1)
        if factor > 1:
            self.resize = ConvTranspose2d(channels, int(factor))
        elif factor < 1:
            self.resize = Conv2d(channels, channels, 3, stride=int(1 / factor), padding=1)
        else:
            self.resize = None

    def forward(self, op, x):
        x = self.projection(op, x)
        return x if self.resize is None else self.resize(op, x)


def reassemble_factors(values: Any, head: str) -> tuple[float, ...]:
    """``reassemble_factors`` checked: positive numbers, a whole factor up or a whole divisor down."""
    factors = tuple(values or ())
    for factor in factors:
        ok = isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 0
        if (
            not ok
            or (factor >= 1 and factor != int(factor))
            or (factor < 1 and 1 / factor != int(1 / factor))
        ):
            raise ConfigError(f"{head}: reassemble factor {factor!r} is not n or 1/n for a whole n")
    return factors


class PreActResidualLayer(nn.Module):
    """``x + conv2(relu(conv1(relu(x))))``, 3x3 convs; DPT's may batch-norm after each conv
    (``use_batch_norm_in_fusion_residual``), its convs then without bias."""

    def __init__(self, channels: int, batch_norm: bool = False, bias: bool = True) -> None:
        super().__init__()
        self.convolution1 = Conv2d(channels, channels, 3, padding=1, bias=bias)
        self.convolution2 = Conv2d(channels, channels, 3, padding=1, bias=bias)
        self.batch_norm1 = BatchNorm2d(channels) if batch_norm else None
        self.batch_norm2 = BatchNorm2d(channels) if batch_norm else None

    def forward(self, op, x):
        y = self.convolution1(op, op.Relu(x))
        if self.batch_norm1 is not None:
            y = self.batch_norm1(op, y)
        y = self.convolution2(op, op.Relu(y))
        if self.batch_norm2 is not None:
            y = self.batch_norm2(op, y)
        return op.Add(x, y)


class FeatureFusionLayer(nn.Module):
    """``projection(upsample(residual_layer2(x + residual_layer1(skip))))``.

    The skip map is first resized to ``x``'s size (an identity when they match, as
    transformers resizes only then); the upsampling goes to ``size`` (the next, finer
    map's), or doubles without one.
    """

    def __init__(self, channels: int, **residual) -> None:
        super().__init__()
        self.projection = Conv2d(channels, channels, 1)
        self.residual_layer1 = PreActResidualLayer(channels, **residual)
        self.residual_layer2 = PreActResidualLayer(channels, **residual)

    def merge(self, op, x, skip):
        """``residual_layer2(x + residual_layer1(skip))``, the skip resized to ``x``'s size."""
        if skip is not None:
            skip = resize_to(op, skip, op.Shape(x, start=2, end=4), align_corners=False)
            x = op.Add(x, self.residual_layer1(op, skip))
        return self.residual_layer2(op, x)

    def upsample(self, op, x, size):
        """``projection`` of ``x`` resized to ``size`` (None: doubled), ``align_corners``."""
        if size is None:
            size = op.Mul(op.Shape(x, start=2, end=4), op.Constant(value_ints=[2, 2]))
        return self.projection(op, resize_to(op, x, size, align_corners=True))

    def forward(self, op, x, skip=None, size=None):
        return self.upsample(op, self.merge(op, x, skip), size)


class FeatureFusionStage(nn.Module):
    """Fusion from the coarsest map to the finest; each step upsamples to the next map's size."""

    layer_class = FeatureFusionLayer

    def __init__(self, channels: int, count: int, **residual) -> None:
        super().__init__()
        self.layers = nn.ModuleList([self.layer_class(channels, **residual) for _ in range(count)])

    def next_size(self, op, maps: list, index: int):
        """The size fused map ``index`` is upsampled to (None: doubled)."""
        return None if index == len(maps) - 1 else op.Shape(maps[index + 1], start=2, end=4)

    def forward(self, op, maps: list, *extra) -> list:
        """Every fused map, coarsest first (``maps`` finest first, as the backbone gives them);
        ``extra`` goes to every layer (Prompt Depth Anything's prompt)."""
        maps = maps[::-1]
        fused, outputs = None, []
        for index, (features, layer) in enumerate(zip(maps, self.layers, strict=True)):
            size = self.next_size(op, maps, index)
            x, skip = (features, None) if fused is None else (fused, features)
            fused = layer(op, x, skip, size, *extra)
            outputs.append(fused)
        return outputs


class ReassembleStage(nn.Module):
    """Each stage's tokens as a map (class token dropped), reassembled at its own scale."""

    def __init__(self, config) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [
                ReassembleLayer(config.reassemble_hidden_size, channels, factor)
                for channels, factor in zip(
                    config.neck_hidden_sizes, config.reassemble_factors, strict=True
                )
            ]
        )

    def to_map(self, op, index: int, tokens, grid):
        """Stage ``index``'s ``[batch, 1 + patches, hidden]`` as ``[batch, hidden, rows, cols]``."""
        return patches_to_map(op, drop_class_token(op, tokens), grid)

    def forward(self, op, hidden_states: list, grid) -> list:
        return [
            layer(op, self.to_map(op, index, tokens, grid))
            for index, (layer, tokens) in enumerate(zip(self.layers, hidden_states, strict=True))
        ]


class DptStyleNeck(nn.Module):
    """``reassemble_stage`` -> ``convs`` (3x3 to ``fusion_hidden_size``) -> ``fusion_stage``."""

    reassemble_class = ReassembleStage
    fusion_class = FeatureFusionStage

    def __init__(self, config, **residual) -> None:
        super().__init__()
        sizes, fusion = config.neck_hidden_sizes, config.fusion_hidden_size
        self.reassemble_stage = self.reassemble_class(config)
        self.convs = nn.ModuleList([Conv2d(c, fusion, 3, padding=1, bias=False) for c in sizes])
        self.fusion_stage = self.fusion_class(fusion, len(sizes), **residual)

    def forward(self, op, hidden_states: list, grid, *extra) -> list:
        maps = self.reassemble_stage(op, hidden_states, grid)
        return self.fusion_stage(
            op, [conv(op, m) for conv, m in zip(self.convs, maps, strict=True)], *extra
        )
