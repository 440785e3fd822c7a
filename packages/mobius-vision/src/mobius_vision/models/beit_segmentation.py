"""BEiT and Data2Vec-Vision semantic segmentation: four of the encoder's layers as maps, an
FPN neck to four scales, UperNet's head.

Registered by architecture class (``BeitForSemanticSegmentation``,
``Data2VecVisionForSemanticSegmentation``): the ``beit`` and ``data2vec-vision`` types stay
image classifiers. The module tree follows those checkpoints as transformers saves them:
``beit.embeddings``/``beit.encoder`` (:mod:`mobius_vision.models.beit`'s, every layer's
output kept), ``fpn1.0``/``fpn1.1``/``fpn1.3`` (transposed conv, BatchNorm, GELU,
transposed conv: 4x), ``fpn2.0`` (2x), the third map as it is, the fourth max-pooled (1/2),
and ``decode_head.*`` (UperNet's head, its BatchNorms named ``bn``; the names transformers 5
saves Data2Vec-Vision's head with are mapped to these). The layers taken are
``out_indices`` (1-based, the embeddings first); the auxiliary FCN head, the final LayerNorm and the pooler are
left unread. ``logits`` are ``[batch, num_labels, 4 * H / patch, 4 * W / patch]``, before
any upsampling, as transformers returns them. The relative position tables are built for
the config's ``image_size``; a processor size other than it is refused (transformers would
interpolate the tables there).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.errors import ConfigError
from mobius.model import Model
from mobius_vision.config import image_size_pair
from mobius_vision.models._conv import (
    BATCHNORM_COUNTERS,
    Activation,
    BatchNorm2d,
    Identity,
    Sequential,
)
from mobius_vision.models._sam_decoder import ConvTranspose2x2
from mobius_vision.models.beit import BeitConfig, BeitEmbeddings, BeitLayersEncoder
from mobius_vision.models.upernet import UperNetConvModule, UperNetHead

#: The encoder layers BeitForSemanticSegmentation reads: exactly four.
FEATURE_LEVELS = 4
#: transformers 5's in-memory names of the head -> the checkpoints' (and this tree's) names.
#: transformers saves BEiT's with the old names but Data2Vec-Vision's with the new ones.
HEAD_RENAMES = (
    (
        re.compile(r"^decode_head\.psp_modules\.blocks\.(\d+)\.conv\."),
        r"decode_head.psp_modules.\1.1.",
    ),
    (re.compile(r"^decode_head\.psp_bottleneck\."), "decode_head.bottleneck."),
    (re.compile(r"^(decode_head\..*)\.convolution\."), r"\1.conv."),
    (re.compile(r"^(decode_head\..*)\.normalization\."), r"\1.bn."),
)


@dataclass
class BeitSegmentationConfig(BeitConfig):
    out_indices: tuple[int, ...] = (3, 5, 7, 11)
    pool_scales: tuple[int, ...] = (1, 2, 3, 6)

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        t, layers = hf_config.model_type, fields["num_hidden_layers"]
        out_indices = tuple(getattr(hf_config, "out_indices", None) or ())
        if len(out_indices) != FEATURE_LEVELS or not all(
            isinstance(i, int) and 1 <= i <= layers + 1 for i in out_indices
        ):
            raise ConfigError(
                f"{t}: out_indices {list(out_indices)} must be {FEATURE_LEVELS} hidden-state "
                f"numbers in 1..{layers + 1}"
            )
        scales = tuple(hf_config.pool_scales)
        if not scales or not all(isinstance(s, int) and s > 0 for s in scales):
            raise ConfigError(f"{t}: pool_scales {list(scales)} must be positive ints")
        height, width = fields["image_size"]
        if height != width:  # transformers reshapes the patches as a square
            raise ConfigError(f"{t}: semantic segmentation needs a square image_size")
        return dict(fields, out_indices=out_indices, pool_scales=scales)

    def with_image_size(self, size: tuple[int, int]) -> BeitSegmentationConfig:
        """The config itself: the tables fit ``image_size`` only (see the module docstring)."""
        size = image_size_pair(size)
        tables = self.use_relative_position_bias or self.use_shared_relative_position_bias
        if size != tuple(self.image_size) and (tables or self.use_absolute_position_embeddings):
            raise ConfigError(
                f"{self.model_type}: the image processor's size {size} is not the config's "
                f"image_size {tuple(self.image_size)}; transformers interpolates the position "
                "tables there, which mobius does not build"
            )
        return dataclasses.replace(self, image_size=size)

    @property
    def layers_read(self) -> int:
        """How many encoder layers the maps need (index ``i`` is ``i - 1`` layers' output)."""
        return max(self.out_indices) - 1

    @property
    def grid(self) -> int:
        return self.image_size[0] // self.patch_size


class BeitFeatureModel(nn.Module):
    """The hidden states ``out_indices`` names as ``[batch, hidden, grid, grid]`` maps.

    transformers reads ``hidden_states[i - 1]`` for each 1-based index ``i``, the embeddings
    being ``hidden_states[0]``: index ``i`` is the output of ``i - 1`` layers.
    """

    def __init__(self, config: BeitSegmentationConfig) -> None:
        super().__init__()
        self.embeddings = BeitEmbeddings(config)
        # The layers past the last one read are never run: built up to it only.
        read = dataclasses.replace(config, num_hidden_layers=config.layers_read)
        self.encoder = BeitLayersEncoder(read)
        self.config = config

    def forward(self, op, pixel_values) -> list:
        c = self.config
        layers = self.encoder(op, self.embeddings(op, pixel_values))
        shape = op.Constant(value_ints=[0, c.hidden_size, c.grid, c.grid])
        maps = []
        for index in c.out_indices:
            patches = op.Slice(layers[index - 1], [1], [2**62], [1])  # the class token dropped
            maps.append(op.Reshape(op.Transpose(patches, perm=[0, 2, 1]), shape))
        return maps


class MaxPool2x2(nn.Module):
    """``nn.MaxPool2d(kernel_size=2, stride=2)``."""

    def forward(self, op, x):
        return op.MaxPool(x, kernel_shape=[2, 2], strides=[2, 2])


class BeitConvModule(UperNetConvModule):
    norm_name = "bn"


class BeitUperHead(UperNetHead):
    conv_module = BeitConvModule


class BeitForSemanticSegmentation(Model):
    """``pixel_values`` -> ``logits`` ``[batch, num_labels, 4 * grid, 4 * grid]``."""

    config_class = BeitSegmentationConfig
    task = "semantic-segmentation"
    base_model_prefix = "beit"

    def __init__(self, config: BeitSegmentationConfig) -> None:
        super().__init__()
        self.config = config
        d, g = config.hidden_size, config.grid
        setattr(self, self.base_model_prefix, BeitFeatureModel(config))
        self.fpn1 = Sequential(
            [ConvTranspose2x2(d, d), BatchNorm2d(d), Activation("gelu"), ConvTranspose2x2(d, d)]
        )
        self.fpn2 = Sequential([ConvTranspose2x2(d, d)])
        self.fpn3 = Identity()
        self.fpn4 = MaxPool2x2()
        grids = [(4 * g, 4 * g), (2 * g, 2 * g), (g, g), (g // 2, g // 2)]
        self.decode_head = BeitUperHead(config, [d] * FEATURE_LEVELS, grids)

    @property
    def ignored(self) -> tuple[str, ...]:
        """The auxiliary head, the final norm and pooler, the mask token, the layers past the
        last one read, BatchNorm counters."""
        prefix, config = self.base_model_prefix, self.config
        unread = ["auxiliary_head.*", f"{prefix}.layernorm.*", f"{prefix}.pooler.*"]
        unread += [f"{prefix}.embeddings.mask_token", BATCHNORM_COUNTERS]
        layers = range(config.layers_read, config.num_hidden_layers)
        return tuple(unread + [f"{prefix}.encoder.layer.{i}.*" for i in layers])

    def sanitize(self, weights: dict) -> dict:
        """The head's names as the original checkpoints have them (see :data:`HEAD_RENAMES`)."""
        renamed = {}
        for name, tensor in weights.items():
            for pattern, replacement in HEAD_RENAMES:
                name = pattern.sub(replacement, name)
            renamed[name] = tensor
        return renamed

    def output_shapes(self) -> dict[str, list]:
        g = 4 * self.config.grid
        return {"logits": ["batch", self.config.num_labels, g, g]}

    def forward(self, op, pixel_values):
        maps = getattr(self, self.base_model_prefix)(op, pixel_values)
        necks = (self.fpn1, self.fpn2, self.fpn3, self.fpn4)
        maps = [neck(op, x) for neck, x in zip(necks, maps, strict=True)]
        return {"logits": self.decode_head(op, maps)}


class Data2VecVisionForSemanticSegmentation(BeitForSemanticSegmentation):
    base_model_prefix = "data2vec_vision"


MODEL_TYPES = {
    "BeitForSemanticSegmentation": BeitForSemanticSegmentation,
    "Data2VecVisionForSemanticSegmentation": Data2VecVisionForSemanticSegmentation,
}
