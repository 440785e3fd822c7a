"""Granite 4 Vision: LLaVA-NeXT's AnyRes tiles over CLIP, window Q-Former downsamplers whose
outputs go into chosen decoder layers, Granite's decoder.

No projected features replace the image placeholders: their embeddings are zeroed, and each
downsampler's packed features are added at the image tokens just before one decoder layer
(``deepstack_layer_map`` pairs a tower layer with a decoder layer; the four spatial
downsamplers read ``spatial_vision_layer`` and feed ``spatial_target_layers``; when two
target one layer, the later one is used, as transformers' dict keeps it).

A downsampler layer-norms one tower layer's patch states (class token dropped under the
``default`` strategy), cuts the ``side x side`` grid into ``window x window`` windows, and
per window runs a BLIP-2 Q-Former whose ``query x query`` queries are the learned ``query``
plus the window's downsampled states (an area average by ``window / query``, or, for the
spatial ones, one corner of each 2x2 block) and whose keys are the window's states plus
``image_positions``; the windows' outputs are put back in a grid and ``out_linear``
projects them. Each tile's grid is then packed as LLaVA-NeXT packs it (the whole image,
the unpadded tile grid with an ``image_newline`` per row).

In the split form the vision graph writes ``image_features`` (the features added before
the first layer, zeros when none is) and ``deepstack_features`` (the others); see
:mod:`._deepstack`. Granite's ``embedding_multiplier`` scales the token embeddings only
(the image rows are zero before it).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar

from onnxscript import nn

from mobius.components import Blip2QFormerModel, LayerNorm, Linear, QFormerConfig
from mobius.errors import ConfigError
from mobius_text.models.granite import GraniteForCausalLM
from mobius_vision.models._deepstack import DeepStackMixin
from mobius_vision.models._vl import VisionLanguageModel, layer_index, vision_tower
from mobius_vision.models.llava_next import (
    LlavaNextConfig,
    LlavaNextForConditionalGeneration,
    value_scope,
)

_TO_END = 2**62


class _NoProjector:
    """A Granite 4 Vision config read as LLaVA's: it has no LLaVA projector to describe."""

    def __init__(self, hf_config) -> None:
        self._hf_config = hf_config

    def __getattr__(self, name):
        unused = {"projector_hidden_act": "gelu", "multimodal_projector_bias": False}
        return unused[name] if name in unused else getattr(self._hf_config, name)


@dataclass
class Granite4VisionConfig(LlavaNextConfig):
    text_head_applied: ClassVar[tuple[str, ...]] = ("logits_scaling",)
    qformer: QFormerConfig | None = None
    query_side: int = 1
    window_side: int = 2
    #: (tower hidden_states index, decoder layer) per layerwise downsampler
    deepstack_layer_map: tuple[tuple[int, int], ...] = ()
    spatial_vision_layer: int = -1
    spatial_target_layers: tuple[int, ...] = ()

    @classmethod
    def text_hf_config(cls, hf_config: Any) -> Any:
        """``granite4_vision_text`` is Granite's config: the decoder is mobius-text's Granite."""
        text = copy.deepcopy(super().text_hf_config(hf_config))
        text.model_type = "granite"
        return text

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(_NoProjector(hf_config))
        vision, text = fields["vision"], fields["text"]
        rate = hf_config.downsample_rate
        try:
            query, window = (int(n) for n in str(rate).split("/"))
        except ValueError:
            raise ConfigError(f"downsample_rate {rate!r} is not 'query/window'") from None
        side = vision.image_size[0] // vision.patch_size
        if not 0 < query <= window or side % window or window % query or side % 2:
            raise ConfigError(
                f"downsample_rate {rate!r} does not window a {side}x{side} patch grid into whole "
                "area averages"
            )
        if Fraction(query, window) != Fraction(1, 2):
            raise ConfigError(
                f"downsample_rate {rate!r}: the spatial downsamplers halve the grid, so transformers "
                "runs only rates of 1/2"
            )
        depth, layers = vision.num_hidden_layers, text.num_hidden_layers
        pairs = tuple((int(v), int(t)) for v, t in hf_config.deepstack_layer_map or ())
        targets = tuple(int(t) for t in hf_config.spatial_target_layers)
        vision_layers = [v for v, _ in pairs] + [int(hf_config.spatial_vision_layer)]
        if len(targets) != 4 or not all(
            0 <= t < layers for t in [*targets, *(t for _, t in pairs)]
        ):
            raise ConfigError(f"deepstack targets {pairs} {targets} are not decoder layers")
        if not any(t > 0 for t in [*targets, *(t for _, t in pairs)]):
            raise ConfigError(f"deepstack targets {pairs} {targets} feed no layer past the first")
        if not all(-depth - 1 <= v <= depth for v in vision_layers):
            raise ConfigError(f"tower layers {vision_layers} are not of the {depth}-layer tower")
        return dict(
            fields,
            qformer=QFormerConfig.from_hf(hf_config.qformer_config, text_input=False),
            query_side=query,
            window_side=window,
            deepstack_layer_map=pairs,
            spatial_vision_layer=int(hf_config.spatial_vision_layer),
            spatial_target_layers=targets,
        )


def windowed(op, x, side: int, window: int, width: int):
    """``[n, side*side, C]`` -> ``[n * (side/window)^2, window*window, C]``, window by window."""
    count = side // window
    x = op.Reshape(x, op.Constant(value_ints=[-1, count, window, count, window, width]))
    x = op.Transpose(x, perm=[0, 1, 3, 2, 4, 5])
    return op.Reshape(x, op.Constant(value_ints=[-1, window * window, width]))


def unwindowed(op, x, count: int, window: int, width: int):
    """``[n * count^2, window^2, C]`` -> ``[n, (count*window)^2, C]``, back in raster order."""
    x = op.Reshape(x, op.Constant(value_ints=[-1, count, count, window, window, width]))
    x = op.Transpose(x, perm=[0, 1, 3, 2, 4, 5])
    return op.Reshape(x, op.Constant(value_ints=[-1, (count * window) ** 2, width]))


class WindowQFormerDownsampler(nn.Module):
    """One downsampler: ``[tiles, side*side, C]`` -> ``[tiles, (side*rate)^2, text_hidden]``."""

    def __init__(self, config: Granite4VisionConfig, offset: int | None) -> None:
        super().__init__()
        width = config.vision.hidden_size
        q, w = config.query_side, config.window_side
        self.norm = LayerNorm(width, 1e-6)
        self.query = nn.Parameter([1, q * q, width])
        self.image_positions = nn.Parameter([1, w * w, width])
        self.qformer = Blip2QFormerModel(config.qformer)
        self.out_linear = Linear(width, config.text.hidden_size, bias=True)
        self.side = config.vision.image_size[0] // config.vision.patch_size
        self.q, self.w, self.offset, self.width = q, w, offset, width

    def downsampled(self, op, x):
        """``[tiles, (side*rate)^2, C]``: one corner of each 2x2 block, or window/query averages."""
        side, width = self.side, self.width
        if self.offset is not None:
            row, col = divmod(self.offset, 2)
            x = op.Reshape(x, op.Constant(value_ints=[-1, side // 2, 2, side // 2, 2, width]))
            x = op.Slice(x, [row, col], [row + 1, col + 1], [2, 4])
            return op.Reshape(x, op.Constant(value_ints=[-1, (side // 2) ** 2, width]))
        f = self.w // self.q
        x = op.Reshape(x, op.Constant(value_ints=[-1, side // f, f, side // f, f, width]))
        x = op.ReduceMean(x, [2, 4], keepdims=0)
        return op.Reshape(x, op.Constant(value_ints=[-1, (side // f) ** 2, width]))

    def forward(self, op, x):
        x = self.norm(op, x)
        count = self.side // self.w
        keys = op.Add(windowed(op, x, self.side, self.w, self.width), self.image_positions)
        queries = windowed(op, self.downsampled(op, x), count * self.q, self.q, self.width)
        out = self.qformer(op, op.Add(self.query, queries), keys, self.q * self.q)
        return self.out_linear(op, unwindowed(op, out, count, self.q, self.width))


class Granite4VisionForConditionalGeneration(DeepStackMixin, LlavaNextForConditionalGeneration):
    config_class = Granite4VisionConfig
    renames = {
        "model.layerwise_projectors.": "layerwise_projectors.",
        "model.spatial_projectors.": "spatial_projectors.",
        **LlavaNextForConditionalGeneration.renames,
    }

    def __init__(self, config: Granite4VisionConfig) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.vision_tower = vision_tower(config.vision)
        self.layerwise_projectors = nn.ModuleList(
            [WindowQFormerDownsampler(config, None) for _ in config.deepstack_layer_map]
        )
        self.spatial_projectors = nn.ModuleList(
            [WindowQFormerDownsampler(config, i) for i in range(4)]
        )
        self.image_newline = nn.Parameter([config.text.hidden_size])
        self.language_model = GraniteForCausalLM(config.text)

    @property
    def side(self) -> int:
        """Feature cells along one side of a tile, after the downsamplers."""
        c = self.config
        return c.vision.image_size[0] // c.vision.patch_size * c.query_side // c.window_side

    def vision_modules(self) -> list[nn.Module]:
        return [self.vision_tower, *self.layerwise_projectors, *self.spatial_projectors]

    def sources(self) -> dict[int, tuple[nn.Module, int]]:
        """Per decoder layer fed: its downsampler and the tower layer it reads (the last wins)."""
        c, depth = self.config, self.config.vision.num_hidden_layers
        fed = {}
        for projector, (layer, target) in zip(
            self.layerwise_projectors, c.deepstack_layer_map, strict=True
        ):
            fed[target] = projector, layer_index(layer, depth)
        spatial = layer_index(c.spatial_vision_layer, depth)
        for projector, target in zip(self.spatial_projectors, c.spatial_target_layers, strict=True):
            fed[target] = projector, spatial
        return fed

    @property
    def levels(self) -> int:
        return len(self.deepstack_layers())

    def deepstack_layers(self) -> list[int]:
        """The decoder layers fed after a layer: each target but the first layer, less one."""
        return [target - 1 for target in sorted(self.sources()) if target > 0]

    @property
    def ignored(self) -> tuple[str, ...]:
        """The downsamplers whose target a later one takes, and the tower past its last read."""
        used = {id(projector) for projector, _ in self.sources().values()}
        unused = [
            f"{name}.{i}.*"
            for name in ("layerwise_projectors", "spatial_projectors")
            for i, projector in enumerate(getattr(self, name))
            if id(projector) not in used
        ]
        deepest = max(layer for _, layer in self.sources().values())
        depth = self.config.vision.num_hidden_layers
        unused += [f"vision_tower.encoder.layers.{i}.*" for i in range(deepest, depth)]
        base = VisionLanguageModel.ignored.fget(self)
        tower = ("vision_tower.post_layernorm.*", "vision_tower.head.*")  # SigLIP's pooling head
        return (*base, *unused, *tower)

    def image_features(self, op, pixel_values, image_sizes):
        self.image_newline._realize(op.builder)  # noqa: SLF001  (root-level name, even in an If)
        with value_scope(op, "anyres_tiles"):
            rows, cols = self.tile_grids(op, image_sizes)
            counts = self.tile_counts(op, rows, cols)  # [num_images]
            tiles = self.real_tiles(op, pixel_values, counts)
        sources = self.sources()
        states = self.tower_states(op, tiles, max(layer for _, layer in sources.values()))
        packed = {}
        for target, (projector, layer) in sorted(sources.items()):
            x = states[layer]
            if self.config.vision_feature_select_strategy == "default":
                x = op.Slice(x, [1], [_TO_END], [1])  # the class token dropped
            features = projector(op, x)
            with value_scope(op, f"anyres_pack_{target}"):
                packed[target] = self.pack_image_features(
                    op, features, counts, rows, cols, image_sizes
                )
        first = packed.pop(0, None)
        if first is None:  # nothing before the first layer: the placeholders stay zero
            first = op.Mul(next(iter(packed.values())), 0.0)
        deepstack = op.Concat(
            *(op.Unsqueeze(packed[t + 1], [0]) for t in self.deepstack_layers()), axis=0
        )
        return first, deepstack

    def real_tiles(self, op, pixel_values, counts):
        """``[tiles, C, H, W]``: each image's real tiles, the zero padding tiles left out."""
        slots = op.Range(
            op.Constant(value_int=0),
            op.Squeeze(op.Shape(pixel_values, start=1, end=2), [0]),
            op.Constant(value_int=1),
        )
        real = op.Less(op.Unsqueeze(slots, [0]), op.Unsqueeze(counts, [1]))  # [N, patches]
        index = op.Squeeze(op.NonZero(op.Reshape(real, [-1])), [0])
        shape = op.Concat([-1], op.Shape(pixel_values, start=2), axis=0)
        return op.Gather(op.Reshape(pixel_values, shape), index)


MODEL_TYPES = {"granite4_vision": Granite4VisionForConditionalGeneration}
