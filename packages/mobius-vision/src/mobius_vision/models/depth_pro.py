"""Depth Pro (``DepthProForDepthEstimation``): multi-scale DINOv2 patch encoding, fusion, a depth
head and, with ``use_fov_model``, a field-of-view head.

The image is seen at several scales (``scaled_images_ratios``, lowest first); each scaled
image is cut into ``patch_size`` squares overlapping by its ``scaled_images_overlap_ratios``
and every square, at every scale, goes through one DINOv2 (the patch encoder). Each
scale's patch features are merged back into one map (``merge_padding_value`` border
cells trimmed where patches meet); two intermediate layers of the patch encoder
(``intermediate_hook_ids``) are merged at the finest scale. A second DINOv2 (the image
encoder) sees the whole image resized to ``patch_size``. The neck upsamples each map
with transposed convs, fuses the image features with the coarsest patch features, and a
DPT-like fusion stage (transposed convs instead of interpolation) feeds the depth head.
The FOV model (a third DINOv2 and a small conv head on the fused global features) gives
one angle per image, in degrees.

The three encoders are whatever mobius registers for their ``model_type`` (DINOv2's
backbone module, :mod:`._backbone`), under transformers' checkpoint names
(``depth_pro.encoder.patch_encoder.model.encoder.layer.0...``).

Patch counts follow from the image size, so the graph takes one size: ``patch_size`` over
the smallest ratio (1536 x 1536 for ``apple/DepthPro-hf``, what its image processor makes).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Conv2d, Linear, module_scope
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_vision.models._backbone import backbone
from mobius_vision.models._conv import BATCHNORM_COUNTERS, Activation, Identity, Sequential
from mobius_vision.models._dpt_neck import PreActResidualLayer, backbone_config, resize_to
from mobius_vision.models._sam_decoder import ConvTranspose2x2

#: The encoder families Depth Pro is built over (the token backbones mobius registers).
ENCODER_TYPES = ("dinov2",)
ENCODERS = ("image_model_config", "patch_model_config", "fov_model_config")


def _positive_ints(hf_config: Any, name: str) -> tuple[int, ...]:
    values = getattr(hf_config, name)
    values = tuple(values) if isinstance(values, (list, tuple)) else (values,)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
        raise ConfigError(f"depth_pro: {name} {list(values)} must be positive whole numbers")
    return values


def _fractions(hf_config: Any, name: str, low: float, high: float) -> tuple[float, ...]:
    values = tuple(getattr(hf_config, name) or ())
    ok = (isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if not all(ok) or not all(low <= v <= high for v in values):
        raise ConfigError(f"depth_pro: {name} {list(values)} must lie in [{low}, {high}]")
    return tuple(float(v) for v in values)


def _encoder_configs(hf_config: Any, patch: int) -> dict[str, Any]:
    """Each encoder's config (the FOV one only with ``use_fov_model``), as the backbone family
    mobius registers for it reads it; each must see ``patch``-sided images."""
    head, encoders = hf_config.model_type, {}
    for name in ENCODERS:
        sub = getattr(hf_config, name)
        if name == "fov_model_config" and not hf_config.use_fov_model:
            continue
        kind = getattr(sub, "model_type", None)
        if kind not in ENCODER_TYPES:
            raise ConfigError(f"{head}: mobius builds its {name} over {ENCODER_TYPES}, not {kind}")
        if getattr(sub, "image_size", None) != patch:
            raise ConfigError(f"{head}: {name}.image_size must equal patch_size {patch}")
        encoders[name] = backbone_config(sub, head)
    return encoders


@dataclass
class DepthProConfig:
    model_type: str
    image_encoder: Any  # each: the encoder family's backbone config (DINOv2's)
    patch_encoder: Any
    fov_encoder: Any | None
    patch_size: int  # the side of a patch, and of the encoders' images
    image_side: int  # the graph's image side: patch_size over the smallest ratio
    scaled_images_ratios: tuple[float, ...]
    scaled_images_overlap_ratios: tuple[float, ...]
    scaled_images_feature_dims: tuple[int, ...]
    intermediate_hook_ids: tuple[int, ...]
    intermediate_feature_dims: tuple[int, ...]
    merge_padding_value: int
    fusion_hidden_size: int
    fusion_batch_norm: bool
    fusion_bias: bool
    num_fov_head_layers: int
    num_channels: int = 3

    @classmethod
    def from_hf(cls, hf_config: Any) -> DepthProConfig:
        head = hf_config.model_type
        patch = hf_config.patch_size
        if not isinstance(patch, int) or isinstance(patch, bool) or patch <= 0:
            raise ConfigError(f"{head}: patch_size {patch!r} must be one positive whole number")
        ratios = _fractions(hf_config, "scaled_images_ratios", 1e-3, 1.0)
        overlaps = _fractions(hf_config, "scaled_images_overlap_ratios", 0.0, 1 - 1 / patch)
        dims = _positive_ints(hf_config, "scaled_images_feature_dims")
        hooks = tuple(hf_config.intermediate_hook_ids or ())
        hook_dims = _positive_ints(hf_config, "intermediate_feature_dims")
        if (
            not ratios
            or list(ratios) != sorted(ratios)
            or not len(ratios) == len(overlaps) == len(dims)
        ):
            raise ConfigError(
                f"{head}: scaled_images_ratios (sorted, lowest first), their overlap ratios and "
                "feature dims must be as many"
            )
        if len(hooks) != len(hook_dims):
            raise ConfigError(f"{head}: intermediate_hook_ids and _feature_dims must be as many")
        if len(ratios) + len(hooks) < 2:
            raise ConfigError(f"{head}: the fusion stage needs two maps at least (scales + hooks)")
        side = patch / ratios[0]
        if side != int(side):
            raise ConfigError(f"{head}: patch_size {patch} over ratio {ratios[0]} is no image size")
        encoders = _encoder_configs(hf_config, patch)
        layers = encoders["patch_model_config"].num_hidden_layers
        if not all(isinstance(h, int) and 0 <= h < layers for h in hooks):
            raise ConfigError(f"{head}: intermediate_hook_ids {list(hooks)} are not layer indices")
        padding, fov_layers = hf_config.merge_padding_value, hf_config.num_fov_head_layers
        for name, value in (("merge_padding_value", padding), ("num_fov_head_layers", fov_layers)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{head}: {name} {value!r} must be a whole number >= 0")
        (fusion,) = _positive_ints(hf_config, "fusion_hidden_size")
        batch_norm = bool(hf_config.use_batch_norm_in_fusion_residual)
        bias = hf_config.use_bias_in_fusion_residual
        return cls(
            model_type=head,
            image_encoder=encoders["image_model_config"],
            patch_encoder=encoders["patch_model_config"],
            fov_encoder=encoders.get("fov_model_config"),
            patch_size=patch,
            image_side=int(side),
            scaled_images_ratios=ratios,
            scaled_images_overlap_ratios=overlaps,
            scaled_images_feature_dims=dims,
            intermediate_hook_ids=hooks,
            intermediate_feature_dims=hook_dims,
            merge_padding_value=padding,
            fusion_hidden_size=fusion,
            fusion_batch_norm=batch_norm,
            fusion_bias=(not batch_norm) if bias is None else bool(bias),
            num_fov_head_layers=fov_layers,
            num_channels=encoders["patch_model_config"].num_channels,
        )

    @property
    def image_grid(self) -> int:
        """The image encoder's patch grid side (transformers' ``out_size``)."""
        return self.patch_size // self.image_encoder.patch_size

    @property
    def base_side(self) -> int:
        """The side of the coarsest feature maps, as transformers computes it."""
        exponent = int(math.log2(self.image_side / self.image_grid))
        return self.image_side // 2**exponent


def fov_head_kernel(config: DepthProConfig) -> int:
    """The FOV head's final kernel side: what its strided convs leave of the image grid (the
    whole map, so the head ends in one value per image)."""
    return int((config.image_grid - 1) / 2**config.num_fov_head_layers + 1)


def patch_origins(side: int, patch: int, overlap: float) -> list[tuple[int, int]]:
    """Top-left corners of the patches ``unfold`` cuts from a ``side``-square image, row-major
    (one patch, no cut, when the image is a patch)."""
    if side == patch:
        return [(0, 0)]
    stride = int(patch * (1 - overlap))
    starts = range(0, side - patch + 1, stride)
    return [(top, left) for top in starts for left in starts]


def tokens_to_patch_maps(op, tokens, count: int, grid: int, hidden: int):
    """``[count * batch, tokens, hidden]`` (patch-major, batch-minor, as transformers stacks
    them) -> ``[count, batch, hidden, grid, grid]`` from the last ``grid * grid`` tokens (the
    leading special tokens dropped)."""
    cells = op.Slice(tokens, [-grid * grid], [2**62], [1])
    maps = op.Reshape(cells, op.Constant(value_ints=[count, -1, grid, grid, hidden]))
    return op.Transpose(maps, perm=[0, 1, 4, 2, 3])


def merge_patches(op, maps, count: int, side: int, padding: int):
    """transformers' ``merge_patches``: the first ``r * r`` of ``count`` patch maps
    ``[count, batch, hidden, side, side]`` tiled row-major into one ``[batch, hidden, s, s]``
    map, ``padding`` cells trimmed from every edge where two patches meet; returns it and s."""
    rows = int(count**0.5)
    padding = 0 if count < 4 else min(side // 4, padding)
    tiled = []
    for row in range(rows):
        boxes = []
        for column in range(rows):
            box = op.Gather(maps, op.Constant(value_int=row * rows + column), axis=0)
            top, left = (padding if row else 0), (padding if column else 0)
            bottom = side - (padding if row < rows - 1 else 0)
            right = side - (padding if column < rows - 1 else 0)
            if (top, left, bottom, right) != (0, 0, side, side):
                box = op.Slice(box, [top, left], [bottom, right], [2, 3])
            boxes.append(box)
        tiled.append(op.Concat(*boxes, axis=3) if rows > 1 else boxes[0])
    merged = op.Concat(*tiled, axis=2) if rows > 1 else tiled[0]
    return merged, rows * side - 2 * (rows - 1) * padding


def feature_map(op, maps, count: int, side: int, padding: int, out_side: int):
    """transformers' ``reconstruct_feature_maps`` on ``[count, batch, hidden, side, side]``
    patch maps: merged, then resized (bilinear) to ``out_side``."""
    merged, merged_side = merge_patches(op, maps, count, side, padding)
    if merged_side == out_side:
        return merged
    return resized(op, merged, out_side)


def resized(op, pixel_values, side: int):
    """``interpolate(pixel_values, size=(side, side), mode="bilinear")``."""
    return resize_to(op, pixel_values, op.Constant(value_ints=[side, side]), align_corners=False)


class EncoderTower(nn.Module):
    """One of Depth Pro's encoders (``<encoder>.model``): the registered backbone returning its
    hidden states after ``hooks`` layers (as they are) and its final one, layer-normed."""

    def __init__(self, model_type: str, config: Any, hooks: tuple[int, ...] = ()) -> None:
        super().__init__()
        layers = config.num_hidden_layers
        config = dataclasses.replace(
            config,
            out_indices=(*(h + 1 for h in hooks), layers),  # 0 is the embeddings' output
            apply_layernorm=False,
            reshape_hidden_states=False,
        )
        self.model = backbone(model_type, config)

    def forward(self, op, pixel_values) -> list:
        *hooked, last = self.model(op, pixel_values)
        with module_scope(op, self.model):  # the backbone's own final norm, by its name
            last = self.model.layernorm(op, last)
        return [*hooked, last]


class DepthProPatchEncoder(EncoderTower):
    """Every scaled image cut into patches, all encoded as one batch (finest scale first); each
    scale's patches merged into a map (coarsest first), then the hooked layers' maps."""

    def __init__(self, config: DepthProConfig) -> None:
        encoder = config.patch_encoder
        super().__init__(encoder.model_type, encoder, config.intermediate_hook_ids)
        self.config = config
        self.grid = config.patch_size // config.patch_encoder.patch_size

    def forward(self, op, pixel_values) -> list:
        config, patch = self.config, self.config.patch_size
        counts, scaled = [], []
        for ratio, overlap in zip(
            config.scaled_images_ratios, config.scaled_images_overlap_ratios, strict=True
        ):
            side = math.floor(config.image_side * ratio)
            image = pixel_values
            if ratio != 1:  # scale_factor, not size: PyTorch's sampling grid
                scales = op.Constant(value_floats=[1.0, 1.0, ratio, ratio])
                image = op.Resize(
                    image, None, scales, mode="linear", coordinate_transformation_mode="half_pixel"
                )
            origins = patch_origins(side, patch, overlap)
            if side != patch:  # unfold: patch-major, batch-minor
                image = op.Concat(
                    *[
                        op.Slice(image, [top, left], [top + patch, left + patch], [2, 3])
                        for top, left in origins
                    ],
                    axis=0,
                )
            scaled.append(image)
            counts.append(len(origins))
        *hooked, last = super().forward(op, op.Concat(*scaled[::-1], axis=0))

        grid, hidden = self.grid, config.patch_encoder.hidden_size
        total, base = sum(counts), config.base_side
        last = tokens_to_patch_maps(op, last, total, grid, hidden)
        maps, start = [], total
        for index, (ratio, count) in enumerate(
            zip(config.scaled_images_ratios, counts, strict=True)
        ):
            start -= count  # the batch holds the finest scale's patches first
            patches = op.Slice(last, [start], [start + count], [0]) if count < total else last
            padding = int(config.merge_padding_value * (1 / ratio))
            maps.append(feature_map(op, patches, count, grid, padding, base * 2**index))
        finest = base * 2 ** (len(counts) - 1)
        padding = int(config.merge_padding_value * (1 / config.scaled_images_ratios[-1]))
        for tokens in hooked:  # every patch, as transformers merges them (the finest lead)
            patches = tokens_to_patch_maps(op, tokens, total, grid, hidden)
            maps.append(feature_map(op, patches, total, grid, padding, finest))
        return maps


class DepthProImageEncoder(EncoderTower):
    """The whole image resized to ``patch_size``, encoded, as a map at the base size."""

    def __init__(self, config: DepthProConfig) -> None:
        super().__init__(config.image_encoder.model_type, config.image_encoder)
        self.config = config

    def forward(self, op, pixel_values):
        config = self.config
        (last,) = super().forward(op, resized(op, pixel_values, config.patch_size))
        grid = config.image_grid
        maps = tokens_to_patch_maps(op, last, 1, grid, config.image_encoder.hidden_size)
        return feature_map(op, maps, 1, grid, 0, config.base_side)


class DepthProEncoder(nn.Module):
    """``[image features, each scale's patch features (coarsest first), hooked features]``."""

    def __init__(self, config: DepthProConfig) -> None:
        super().__init__()
        self.patch_encoder = DepthProPatchEncoder(config)
        self.image_encoder = DepthProImageEncoder(config)

    def forward(self, op, pixel_values) -> list:
        patch_features = self.patch_encoder(op, pixel_values)
        return [self.image_encoder(op, pixel_values), *patch_features]


class UpsampleBlock(nn.Module):
    """``layers``: an optional 1x1 projection, then ``count`` transposed convs doubling the map."""

    def __init__(
        self, in_dims: int, mid_dims: int, out_dims: int, count: int, project=True, bias=False
    ) -> None:
        super().__init__()
        layers = [Conv2d(in_dims, mid_dims, 1, bias=bias)] if project else []
        for index in range(count):
            layers.append(ConvTranspose2x2(mid_dims if index == 0 else out_dims, out_dims, bias))
        self.layers = Sequential(layers)

    def forward(self, op, x):
        return self.layers(op, x)


class DepthProFeatureUpsample(nn.Module):
    """Each encoder map upsampled: the image's once, each scale's once, hook ``i``'s 2 + i times."""

    def __init__(self, config: DepthProConfig) -> None:
        super().__init__()
        image_dims = config.image_encoder.hidden_size
        patch_dims = config.patch_encoder.hidden_size
        first = config.scaled_images_feature_dims[0]
        self.image_block = UpsampleBlock(image_dims, image_dims, first, 1, project=False, bias=True)
        self.scaled_images = nn.ModuleList(
            [UpsampleBlock(patch_dims, d, d, 1) for d in config.scaled_images_feature_dims]
        )
        self.intermediate = nn.ModuleList(
            [
                UpsampleBlock(patch_dims, config.fusion_hidden_size if i == 0 else d, d, 2 + i)
                for i, d in enumerate(config.intermediate_feature_dims)
            ]
        )

    def forward(self, op, features: list) -> list:
        blocks = [self.image_block, *self.scaled_images, *self.intermediate]
        return [block(op, x) for block, x in zip(blocks, features, strict=True)]


class DepthProNeck(nn.Module):
    """Upsampled maps; the image's fused with the coarsest scale's (the global features); each
    projected to ``fusion_hidden_size`` (3x3, the last kept where it already has that width)."""

    def __init__(self, config: DepthProConfig) -> None:
        super().__init__()
        first = config.scaled_images_feature_dims[0]
        self.feature_upsample = DepthProFeatureUpsample(config)
        self.fuse_image_with_low_res = Conv2d(2 * first, first, 1)
        self.feature_projection = DepthProFeatureProjection(config)

    def forward(self, op, features: list) -> list:
        image, coarsest, *finer = self.feature_upsample(op, features)
        fused = self.fuse_image_with_low_res(op, op.Concat(coarsest, image, axis=1))
        return self.feature_projection(op, [fused, *finer])


class DepthProFeatureProjection(nn.Module):
    """Each map to ``fusion_hidden_size`` (3x3, no bias); the last kept where it has that width."""

    def __init__(self, config: DepthProConfig) -> None:
        super().__init__()
        fusion = config.fusion_hidden_size
        dims = [*config.scaled_images_feature_dims, *config.intermediate_feature_dims]
        self.projections = nn.ModuleList(
            [
                Identity()
                if i == len(dims) - 1 and d == fusion
                else Conv2d(d, fusion, 3, padding=1, bias=False)
                for i, d in enumerate(dims)
            ]
        )

    def forward(self, op, maps: list) -> list:
        return [p(op, x) for p, x in zip(self.projections, maps, strict=True)]


class DepthProModel(nn.Module):
    """``depth_pro``: the encoders and the neck; the fusion stage's inputs, coarsest first."""

    def __init__(self, config: DepthProConfig) -> None:
        super().__init__()
        self.encoder = DepthProEncoder(config)
        self.neck = DepthProNeck(config)

    def forward(self, op, pixel_values) -> list:
        return self.neck(op, self.encoder(op, pixel_values))


class DepthProFusionLayer(nn.Module):
    """``projection(deconv(residual_layer2(x + residual_layer1(skip))))``: sizes already match
    (no interpolation, unlike DPT's); the final layer has no ``deconv``."""

    def __init__(self, channels: int, deconv: bool, **residual) -> None:
        super().__init__()
        self.residual_layer1 = PreActResidualLayer(channels, **residual)
        self.residual_layer2 = PreActResidualLayer(channels, **residual)
        self.deconv = ConvTranspose2x2(channels, channels, bias=False) if deconv else None
        self.projection = Conv2d(channels, channels, 1)

    def forward(self, op, x, skip=None):
        if skip is not None:
            x = op.Add(x, self.residual_layer1(op, skip))
        x = self.residual_layer2(op, x)
        if self.deconv is not None:
            x = self.deconv(op, x)
        return self.projection(op, x)


class DepthProFusionStage(nn.Module):
    """Fusion from the global features to the finest hooked map; returns the last fused map."""

    def __init__(self, config: DepthProConfig) -> None:
        super().__init__()
        count = len(config.scaled_images_ratios) + len(config.intermediate_hook_ids)
        fusion = config.fusion_hidden_size
        residual = dict(batch_norm=config.fusion_batch_norm, bias=config.fusion_bias)
        self.intermediate = nn.ModuleList(
            [DepthProFusionLayer(fusion, True, **residual) for _ in range(count - 1)]
        )
        self.final = DepthProFusionLayer(fusion, False, **residual)

    def forward(self, op, maps: list):
        fused = None
        for x, layer in zip(maps[:-1], self.intermediate, strict=True):
            fused = layer(op, x) if fused is None else layer(op, fused, x)
        return self.final(op, fused, maps[-1])


class DepthProDepthEstimationHead(nn.Module):
    """conv 3x3 to half -> transposed conv x2 -> conv 3x3 to 32, ReLU -> conv 1x1 to 1, ReLU."""

    def __init__(self, config: DepthProConfig) -> None:
        super().__init__()
        features = config.fusion_hidden_size
        self.layers = Sequential(
            [
                Conv2d(features, features // 2, 3, padding=1),
                ConvTranspose2x2(features // 2, features // 2),
                Conv2d(features // 2, 32, 3, padding=1),
                Activation("relu"),
                Conv2d(32, 1, 1),
                Activation("relu"),
            ]
        )

    def forward(self, op, x):
        return op.Squeeze(self.layers(op, x), op.Constant(value_ints=[1]))


class DepthProFovEncoder(EncoderTower):
    """The whole image resized to ``patch_size``, encoded, narrowed by ``neck``, as a map at the
    base size."""

    def __init__(self, config: DepthProConfig) -> None:
        encoder = config.fov_encoder
        super().__init__(encoder.model_type, encoder)
        self.neck = Linear(encoder.hidden_size, config.fusion_hidden_size // 2, bias=True)
        self.config = config

    def forward(self, op, pixel_values):
        config = self.config
        (last,) = super().forward(op, resized(op, pixel_values, config.patch_size))
        grid = config.patch_size // config.fov_encoder.patch_size
        half = config.fusion_hidden_size // 2
        maps = tokens_to_patch_maps(op, self.neck(op, last), 1, grid, half)
        return feature_map(op, maps, 1, grid, 0, config.base_side)


class DepthProFovHead(nn.Module):
    """The map resized to the image encoder's grid, halved ``num_fov_head_layers`` times by
    strided 3x3 convs (each with a ReLU), then one conv to a single value per image."""

    def __init__(self, config: DepthProConfig) -> None:
        super().__init__()
        width, count = config.fusion_hidden_size, config.num_fov_head_layers
        layers = []
        for i in range(count):
            channels = math.ceil(width / 2 ** (i + 1)), math.ceil(width / 2 ** (i + 2))
            layers += [Conv2d(*channels, 3, stride=2, padding=1), Activation("relu")]
        layers.append(Conv2d(math.ceil(width / 2 ** (count + 1)), 1, fov_head_kernel(config)))
        self.layers = Sequential(layers)
        self.grid = config.image_grid

    def forward(self, op, x, side: int):
        if side != self.grid:
            x = resized(op, x, self.grid)
        return op.Reshape(self.layers(op, x), op.Constant(value_ints=[-1]))


class DepthProFovModel(nn.Module):
    """``field_of_view`` in degrees, one per image: the FOV encoder's map plus the global
    features (a strided conv, ReLU), through the head."""

    def __init__(self, config: DepthProConfig) -> None:
        super().__init__()
        fusion = config.fusion_hidden_size
        self.fov_encoder = DepthProFovEncoder(config)
        self.conv = Conv2d(fusion, fusion // 2, 3, stride=2, padding=1)
        self.head = DepthProFovHead(config)
        self.base_side = config.base_side

    def forward(self, op, pixel_values, global_features):
        features = op.Add(
            self.fov_encoder(op, pixel_values), op.Relu(self.conv(op, global_features))
        )
        return self.head(op, features, self.base_side)


class DepthProForDepthEstimation(Model):
    """``pixel_values`` [batch, 3, side, side] -> ``predicted_depth`` [batch, depth side, depth
    side] (inverse depth, before the processor's conversion) and, with the FOV model,
    ``field_of_view`` [batch] in degrees."""

    config_class = DepthProConfig
    task = "depth-estimation"

    def __init__(self, config: DepthProConfig) -> None:
        super().__init__()
        self.config = config
        self.fixed_image_size = (config.image_side, config.image_side)
        self.depth_pro = DepthProModel(config)
        self.fusion_stage = DepthProFusionStage(config)
        self.head = DepthProDepthEstimationHead(config)
        self.fov_model = None if config.fov_encoder is None else DepthProFovModel(config)

    @property
    def ignored(self) -> tuple[str, ...]:
        """DINOv2's mask tokens, batch-norm counters, the first fusion layer's skip unit (it has no
        skip), and a FOV model the config leaves out (transformers skips it too)."""
        return (
            "*.model.embeddings.mask_token",
            BATCHNORM_COUNTERS,
            "fusion_stage.intermediate.0.residual_layer1.*",
            *(("fov_model.*",) if self.fov_model is None else ()),
        )

    def output_shapes(self) -> dict[str, list]:
        # The global map is twice the base side; each fusion layer but the last, and the head,
        # double it.
        maps = len(self.config.scaled_images_ratios) + len(self.config.intermediate_hook_ids)
        fused = self.config.base_side * 2 ** (maps + 1)
        shapes = {"predicted_depth": ["batch", fused, fused]}
        if self.fov_model is not None:
            shapes["field_of_view"] = ["batch"]
        return shapes

    def forward(self, op, pixel_values):
        features = self.depth_pro(op, pixel_values)
        depth = self.head(op, self.fusion_stage(op, features))
        outputs = {"predicted_depth": depth}
        if self.fov_model is not None:
            outputs["field_of_view"] = self.fov_model(op, pixel_values, features[0])
        return outputs


MODEL_TYPES = {"depth_pro": DepthProForDepthEstimation}
