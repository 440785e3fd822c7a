"""InternVL: an InternViT tile's patch tokens, pixel-shuffled, a LayerNorm + MLP projector, any text
decoder (Qwen2 in the released models).

Each tile (the processor crops an image to several tiles and a thumbnail) is one
``pixel_values`` row. Its features are ``hidden_states[vision_feature_layer]`` (``-1``
reads ``last_hidden_state``, after the tower's final norm), the class token dropped,
laid out as the square patch grid, and pixel-shuffled by ``downsample_ratio``: each
``r x r`` block of patches (``r = 1 / downsample_ratio``) becomes one token ``r * r``
times as wide. The projector is ``layer_norm -> linear_1 -> act -> linear_2``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, module_scope
from mobius.errors import ConfigError
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._vl import VisionLanguageModel, flatten_images, layer_index
from mobius_vision.models.llava import LlavaMultiModalProjector

_TO_END = 2**62


@dataclass
class InternVLConfig(VisionLanguageConfig):
    vision_feature_layer: int = -1
    shuffle: int = 2  # 1 / downsample_ratio
    projector_hidden_act: str = "gelu"

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        layer = hf_config.vision_feature_layer
        if not isinstance(layer, int):
            raise ConfigError(
                f"internvl: vision_feature_layer {layer!r}: transformers reads one layer (an int)"
            )
        if hf_config.vision_feature_select_strategy != "default":
            raise ConfigError(
                f"internvl: vision_feature_select_strategy "
                f"{hf_config.vision_feature_select_strategy!r}: only 'default' gives the square "
                "patch grid transformers' pixel shuffle and projector need"
            )
        ratio = hf_config.downsample_ratio
        shuffle = round(1 / ratio)
        if abs(shuffle * ratio - 1) > 1e-9:
            raise ConfigError(f"internvl: downsample_ratio {ratio} is not 1 / an integer")
        fields = super().hf_fields(hf_config)
        vision = fields["vision"]
        height, width = vision.image_size
        grid = height // vision.patch_size
        if height != width or grid % shuffle:
            raise ConfigError(
                f"internvl: a {height}x{width} tile in patches of {vision.patch_size} is not a "
                f"square grid divisible by {shuffle} (1 / downsample_ratio)"
            )
        return dict(
            fields,
            vision_feature_layer=layer,
            shuffle=shuffle,
            projector_hidden_act=hf_config.projector_hidden_act,
        )


class InternVLMultiModalProjector(LlavaMultiModalProjector):
    """``layer_norm`` (eps 1e-5) over the shuffled width, then LLaVA's two-layer MLP."""

    def __init__(self, in_features: int, hidden: int, act: str) -> None:
        super().__init__(in_features, hidden, act, bias=True)
        self.layer_norm = LayerNorm(in_features, 1e-5)

    def forward(self, op, x):
        return super().forward(op, self.layer_norm(op, x))


def pixel_shuffle(op, x, grid: int, width: int, r: int):
    """``[tiles, grid*grid, width]`` to ``[tiles, (grid/r)**2, width*r*r]`` as transformers' views.

    Reshape 0 copies the tile count (no images stay no images).
    """
    g = grid // r
    x = op.Reshape(x, op.Constant(value_ints=[0, grid, g, width * r]))
    x = op.Transpose(x, perm=[0, 2, 1, 3])  # [tiles, g, grid, width*r]
    x = op.Reshape(x, op.Constant(value_ints=[0, g, g, width * r * r]))
    x = op.Transpose(x, perm=[0, 2, 1, 3])
    return op.Reshape(x, op.Constant(value_ints=[0, g * g, width * r * r]))


class InternVLForConditionalGeneration(VisionLanguageModel):
    config_class = InternVLConfig

    def make_projector(self, config: InternVLConfig) -> nn.Module:
        width = config.vision.hidden_size * config.shuffle**2
        return InternVLMultiModalProjector(
            width, config.text.hidden_size, config.projector_hidden_act
        )

    @property
    def feature_layer(self) -> int:
        """The tower's ``hidden_states`` index read, non-negative."""
        depth = self.config.vision.num_hidden_layers
        return layer_index(self.config.vision_feature_layer, depth)

    def select_features(self, op, pixel_values):
        """``[tiles, patches, hidden]``: the chosen layer's patch tokens."""
        tower, layer = self.vision_tower, self.feature_layer
        with module_scope(op, tower):
            states = tower.hidden_states(op, pixel_values, layer)
            x = states[layer]
            if self.config.vision_feature_layer == -1:  # last_hidden_state, not hidden_states[-1]
                x = tower.final_norm(op, x)
        return op.Slice(x, [1], [_TO_END], [1])  # the class token dropped

    def image_features(self, op, pixel_values):
        c = self.config
        grid = c.vision.image_size[0] // c.vision.patch_size
        x = pixel_shuffle(
            op, self.select_features(op, pixel_values), grid, c.vision.hidden_size, c.shuffle
        )
        return flatten_images(
            op, self.multi_modal_projector(op, x)
        )  # [tiles * tokens, text_hidden]

    @property
    def ignored(self) -> tuple[str, ...]:
        depth = self.config.vision.num_hidden_layers
        unused = [f"vision_tower.encoder.layer.{i}.*" for i in range(self.feature_layer, depth)]
        if self.config.vision_feature_layer != -1 and not self.config.vision.use_mean_pooling:
            unused.append("vision_tower.layernorm.*")
        if self.config.vision.use_mask_token:
            unused.append("vision_tower.embeddings.mask_token")
        return (*super().ignored, *unused)


MODEL_TYPES = {"internvl": InternVLForConditionalGeneration}
