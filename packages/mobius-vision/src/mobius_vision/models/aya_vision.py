"""Aya Vision: a SigLIP tower's hidden state, pixel-shuffled, a SwiGLU projector, a Cohere2 decoder.

The processor cuts an image into tiles (plus a thumbnail); every tile goes through
the tower as its own image, and the features of all tiles follow each other in
order, as the processor's ``<|IMG_PATCH|>`` placeholders do. The projector folds
each ``downsample_factor``-square of patches into one token (``pixel_shuffle``),
then ``layernorm -> linear_1 -> SwiGLU -> linear_2``. The tower runs only as far
as ``vision_feature_layer``; its later layers, ``post_layernorm`` and pooling
``head`` are left unused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear
from mobius.errors import ConfigError
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._vl import VisionLanguageModel, flatten_images, layer_index

_TO_END = 2**62


@dataclass
class AyaVisionConfig(VisionLanguageConfig):
    vision_feature_layer: int = -1
    vision_feature_select_strategy: str = "full"
    downsample_factor: int = 2
    adapter_layer_norm_eps: float = 1e-6
    alignment_intermediate_size: int = 0

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        layer = hf_config.vision_feature_layer
        if isinstance(layer, (list, tuple)):
            if len(layer) != 1:  # the projector's width is one layer's: PyTorch fails as well
                raise ConfigError(
                    f"vision_feature_layer {list(layer)}: Aya Vision's projector reads one layer"
                )
            layer = layer[0]
        strategy = hf_config.vision_feature_select_strategy
        if strategy not in ("default", "full"):
            raise ConfigError(f"vision_feature_select_strategy {strategy!r} is not default or full")
        # Aya's config does not declare it; its projector falls back to the text width.
        size = getattr(hf_config, "alignment_intermediate_size", fields["text"].hidden_size)
        return dict(
            fields,
            vision_feature_layer=int(layer),
            vision_feature_select_strategy=strategy,
            downsample_factor=int(hf_config.downsample_factor),
            adapter_layer_norm_eps=float(getattr(hf_config, "adapter_layer_norm_eps", 1e-6)),
            alignment_intermediate_size=swiglu_size(size),
        )


def swiglu_size(size: int) -> int:
    """``alignment_intermediate_size``, checked to split into two equal SwiGLU halves."""
    if size % 2:  # chunk(2) would leave linear_2 a half of the wrong width
        raise ConfigError(f"alignment_intermediate_size {size} is odd: SwiGLU splits it in two")
    return int(size)


def pixel_shuffle(op, x, factor: int):
    """``[tiles, side*side, D]`` -> ``[tiles, (side/f)**2, f*f*D]``, transformers' ``pixel_shuffle``.

    Each ``f x f`` square of patches becomes one token whose width holds the square
    row by row (``(i, j, d)``); the tokens stay in row-major order. ``side`` is
    ``floor(sqrt(tokens))``, as transformers computes it.
    """
    tokens = op.Cast(op.Shape(x, start=1, end=2), to=ir.DataType.DOUBLE)
    side = op.Cast(op.Floor(op.Sqrt(tokens)), to=ir.DataType.INT64)
    f = op.Constant(value_ints=[factor])
    cells = op.Div(side, f)  # [1]: squares per side
    batch, width = op.Shape(x, start=0, end=1), op.Shape(x, start=2)
    x = op.Reshape(x, op.Concat(batch, cells, f, cells, f, width, axis=0))  # [B, r', i, c', j, D]
    x = op.Transpose(x, perm=[0, 1, 3, 2, 4, 5])  # [B, r', c', i, j, D]
    folded = op.Mul(width, op.Constant(value_ints=[factor * factor]))
    return op.Reshape(x, op.Concat(batch, op.Constant(value_ints=[-1]), folded, axis=0))


def swiglu(op, h):
    """``silu(gate) * x`` where ``x, gate = h.chunk(2, -1)``."""
    x, gate = op.Split(h, axis=-1, num_outputs=2, _outputs=2)
    return op.Mul(op.Mul(gate, op.Sigmoid(gate)), x)


class AyaVisionMultiModalProjector(nn.Module):
    """``pixel_shuffle -> layernorm -> linear_1 -> SwiGLU -> linear_2``."""

    def __init__(self, width: int, intermediate: int, out: int, factor: int, eps: float) -> None:
        super().__init__()
        folded = width * factor * factor
        self.factor = factor
        self.layernorm = LayerNorm(folded, eps)
        self.linear_1 = Linear(folded, intermediate, bias=True)
        self.linear_2 = Linear(intermediate // 2, out, bias=True)

    def forward(self, op, x):
        x = self.layernorm(op, pixel_shuffle(op, x, self.factor))  # [tiles, tokens, f*f*D]
        return self.linear_2(op, swiglu(op, self.linear_1(op, x)))  # [tiles, tokens, text_hidden]


class AyaVisionForConditionalGeneration(VisionLanguageModel):
    """The tower, :class:`AyaVisionMultiModalProjector` and the Cohere2 (or other) decoder."""

    config_class = AyaVisionConfig

    def make_projector(self, config: AyaVisionConfig) -> nn.Module:
        return AyaVisionMultiModalProjector(
            config.vision.hidden_size,
            config.alignment_intermediate_size,
            config.text.hidden_size,
            config.downsample_factor,
            config.adapter_layer_norm_eps,
        )

    @property
    def feature_layer(self) -> int:
        """The tower's ``hidden_states`` index read, non-negative."""
        return layer_index(self.config.vision_feature_layer, self.config.vision.num_hidden_layers)

    def select_features(self, op, pixel_values):
        """``[tiles, tokens, width]``: the chosen state, first token dropped by ``default``."""
        x = self.tower_states(op, pixel_values, self.feature_layer)[self.feature_layer]
        if self.config.vision_feature_select_strategy == "default":
            x = op.Slice(x, [1], [_TO_END], [1])
        return x

    def image_features(self, op, pixel_values):
        x = self.multi_modal_projector(op, self.select_features(op, pixel_values))
        return flatten_images(op, x)  # [tiles * tokens, text_hidden], tiles in order

    #: transformers 4.5x nested the SigLIP tower's own ``vision_model.`` under ``model.``.
    renames = {"model.vision_tower.vision_model.": "vision_tower.", **VisionLanguageModel.renames}

    @property
    def ignored(self) -> tuple[str, ...]:
        depth = self.config.vision.num_hidden_layers
        layers = [f"vision_tower.encoder.layers.{i}.*" for i in range(self.feature_layer, depth)]
        return (*super().ignored, *layers, "vision_tower.post_layernorm.*", "vision_tower.head.*")


MODEL_TYPES = {"aya_vision": AyaVisionForConditionalGeneration}
