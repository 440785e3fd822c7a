"""Granite-Docling: a SigLIP-style tower over whole page tiles, a pixel-shuffle connector with
DeepStack, Granite's decoder.

The vision graph takes what ``GraniteDoclingProcessor`` gives: ``pixel_values [batch, tiles,
channels, size, size]`` (each page's tiles then its thumbnail, padded with zero tiles to the
batch's largest count) and ``pixel_attention_mask`` int64 ``[batch, tiles]`` (1 on real
tiles). The real tiles go through the tower (learned positions, no patch mask: tiles are
always whole) and its ``post_layernorm``; the connector's coarse path folds each
``scale_factor x scale_factor`` block of ``ln_in``-normed states into one token
(Idefics3's ``pixel_shuffle``), projects it, adds a fixed 2-D sine-cosine table (columns
half first, as the checkpoints were trained), then ``ln_mid``, GELU, ``mlp_fc2`` and
``ln_out``. The outputs of the tower layers at ``deepstack_visual_indexes`` are shuffled
alike through their own mergers and added to the decoder's hidden states at the image
tokens after its first layers (:mod:`._deepstack`).

Granite's decoder scales the merged embeddings by ``embedding_multiplier``: here the image
features are scaled before the merge, as the token embeddings are at their lookup. The
logits are divided by ``logits_scaling``.

Not built: the connector's fine path (4x the tokens per tile, taken when the processor
is called with ``fine_route=True``) and the density router that proposes it; their
weights are left unused. ``granite_docling_text`` is Granite's config: the decoder is
mobius-text's Granite, built here (not registered on its own: transformers has no causal
LM of that type to check it against alone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation
from mobius.errors import ConfigError
from mobius_text.models.granite import GraniteConfig, GraniteForCausalLM
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._deepstack import DeepStackMixin
from mobius_vision.models._vl import VisionLanguageModel, flatten_images
from mobius_vision.models.clip_vision import CLIPEncoder
from mobius_vision.models.idefics3 import Idefics3Connector
from mobius_vision.models.idefics3_vision import Idefics3VisionConfig
from mobius_vision.models.siglip_vision import SiglipVisionEmbeddings


@dataclass
class GraniteDoclingVisionConfig(Idefics3VisionConfig):
    out_hidden_size: int = 1024
    scale_factor: int = 4
    deepstack_visual_indexes: tuple[int, ...] = ()

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        scale, side = hf_config.scale_factor, fields["image_size"][0] // fields["patch_size"]
        if not isinstance(scale, int) or scale < 1 or side % scale:
            raise ConfigError(f"scale_factor {scale!r} does not fold {side} patches a side")
        if hf_config.out_hidden_size % 4:  # the sine-cosine table's four quarters
            raise ConfigError(f"out_hidden_size {hf_config.out_hidden_size} is not a multiple of 4")
        indexes = tuple(hf_config.deepstack_visual_indexes or ())
        layers = fields["num_hidden_layers"]
        if not indexes or not all(isinstance(i, int) and 0 <= i < layers for i in indexes):
            raise ConfigError(
                f"deepstack_visual_indexes {list(indexes)} are not (at least one of) the tower's "
                "layers"
            )
        return dict(
            fields,
            out_hidden_size=int(hf_config.out_hidden_size),
            scale_factor=scale,
            deepstack_visual_indexes=indexes,
        )

    @property
    def num_patches(self) -> int:
        return self.patches_per_side**2


@dataclass
class GraniteDoclingConfig(VisionLanguageConfig):
    text_head_applied: ClassVar[tuple[str, ...]] = ("logits_scaling",)

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        vision = GraniteDoclingVisionConfig.from_hf(hf_config.vision_config)
        text = GraniteConfig.from_hf(cls.text_hf_config(hf_config))
        if vision.out_hidden_size != text.hidden_size:
            raise ConfigError(
                f"vision out_hidden_size {vision.out_hidden_size} is not the text width "
                f"{text.hidden_size}"
            )
        if len(vision.deepstack_visual_indexes) > text.num_hidden_layers:
            raise ConfigError(
                f"{len(vision.deepstack_visual_indexes)} DeepStack levels for "
                f"{text.num_hidden_layers} decoder layers"
            )
        return dict(
            model_type=hf_config.model_type,
            vision=vision,
            text=text,
            image_token_id=int(hf_config.image_token_id),
        )


def sine_cosine_table(side: int, dim: int) -> np.ndarray:
    """``[side * side, dim]`` float32: per row-major grid position ``[sin | cos]`` of its column
    then of its row, over ``dim / 4`` frequencies ``10000^(-k / (dim / 4))``."""
    quarter = dim // 4
    omega = 1.0 / 10000.0 ** (np.arange(quarter, dtype=np.float64) / quarter)
    rows, cols = np.meshgrid(np.arange(side, dtype=np.float64), np.arange(side), indexing="ij")
    by_row, by_col = np.outer(rows.ravel(), omega), np.outer(cols.ravel(), omega)
    table = [np.sin(by_col), np.cos(by_col), np.sin(by_row), np.cos(by_row)]
    return np.concatenate(table, axis=1).astype(np.float32)


class GraniteDoclingVisionTower(nn.Module):
    """``embeddings``, Idefics3's (SigLIP's) layers, ``post_layernorm``."""

    def __init__(self, config: GraniteDoclingVisionConfig) -> None:
        super().__init__()
        self.embeddings = SiglipVisionEmbeddings(config)
        self.encoder = CLIPEncoder(config)
        self.post_layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.taps = config.deepstack_visual_indexes

    def forward(self, op, pixel_values):
        """``[tiles, patches, hidden]``: the normed last states, then each DeepStack tap's."""
        states = self.encoder(op, self.embeddings(op, pixel_values), None)
        return self.post_layernorm(op, states[-1]), [states[i + 1] for i in self.taps]


class GraniteDoclingDeepStackMerger(nn.Module):
    def __init__(self, width: int, out: int) -> None:
        super().__init__()
        self.layer_norm = LayerNorm(width, 1e-5)
        self.linear_1 = Linear(width, out, bias=True)
        self.act = get_activation("gelu")
        self.linear_2 = Linear(out, out, bias=True)

    def forward(self, op, x):
        return self.linear_2(op, self.act(op, self.linear_1(op, self.layer_norm(op, x))))


class GraniteDoclingConnectorPath(Idefics3Connector):
    """``pixel_shuffle``, ``projection`` and the fixed positions; the DeepStack mergers."""

    def __init__(self, config: GraniteDoclingVisionConfig, scale: int) -> None:
        nn.Module.__init__(self)
        self.side, self.width, self.scale = config.patches_per_side, config.hidden_size, scale
        width, out = config.hidden_size * scale * scale, config.out_hidden_size
        self.projection = Linear(width, out, bias=False)
        self.deepstack_mergers = nn.ModuleList(
            [GraniteDoclingDeepStackMerger(width, out) for _ in config.deepstack_visual_indexes]
        )
        self.positions = sine_cosine_table(config.patches_per_side // scale, out)

    def forward(self, op, x, taps):
        x = self.projection(op, self.pixel_shuffle(op, x))
        x = op.Add(x, op.CastLike(op.Constant(value=ir.tensor(self.positions)), x))
        levels = [
            flatten_images(op, merger(op, self.pixel_shuffle(op, tap)))
            for merger, tap in zip(self.deepstack_mergers, taps, strict=True)
        ]
        return x, levels


class GraniteDoclingConnector(nn.Module):
    """The coarse path between ``ln_in`` and ``ln_mid -> GELU -> mlp_fc2 -> ln_out``."""

    def __init__(self, config: GraniteDoclingVisionConfig) -> None:
        super().__init__()
        out = config.out_hidden_size
        self.ln_in = LayerNorm(config.hidden_size, 1e-5)
        self.coarse = GraniteDoclingConnectorPath(config, config.scale_factor)
        self.ln_mid = LayerNorm(out, 1e-5)
        self.act = get_activation("gelu")
        self.mlp_fc2 = Linear(out, out, bias=False)
        self.ln_out = LayerNorm(out, 1e-5)

    def forward(self, op, states, taps):
        x, levels = self.coarse(op, self.ln_in(op, states), taps)
        x = self.ln_out(op, self.mlp_fc2(op, self.act(op, self.ln_mid(op, x))))
        return flatten_images(op, x), levels


class GraniteDoclingForConditionalGeneration(DeepStackMixin, VisionLanguageModel):
    config_class = GraniteDoclingConfig
    renames = {
        "model.vision_model.connector.": "multi_modal_projector.",
        "model.vision_model.": "vision_tower.",
        "model.text_model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
    }

    def __init__(self, config: GraniteDoclingConfig) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.vision_tower = GraniteDoclingVisionTower(config.vision)
        self.multi_modal_projector = GraniteDoclingConnector(config.vision)
        self.language_model = GraniteForCausalLM(config.text)

    @property
    def levels(self) -> int:
        return len(self.config.vision.deepstack_visual_indexes)

    def vision_inputs(self, dtype) -> list[tuple]:
        size = self.config.vision.image_size[0]
        channels = self.config.vision.num_channels
        return [
            ("pixel_values", dtype, ["batch", "num_tiles", channels, size, size]),
            ("pixel_attention_mask", ir.DataType.INT64, ["batch", "num_tiles"]),
        ]

    def image_features(self, op, pixel_values, pixel_attention_mask):
        size, channels = self.config.vision.image_size[0], self.config.vision.num_channels
        tiles = op.Reshape(pixel_values, op.Constant(value_ints=[-1, channels, size, size]))
        real = op.Cast(op.Reshape(pixel_attention_mask, [-1]), to=ir.DataType.BOOL)
        states, taps = self.vision_tower(op, op.Compress(tiles, real, axis=0))
        features, levels = self.multi_modal_projector(op, states, taps)
        deepstack = op.Concat(*(op.Unsqueeze(level, [0]) for level in levels), axis=0)
        return features, deepstack

    def embed(self, op, input_ids, image_features, deepstack_features):
        """Granite's decoder scales the merged embeddings: the image features too."""
        scaled = op.Mul(image_features, self.config.text.embedding_multiplier)
        return super().embed(op, input_ids, scaled, deepstack_features)

    @property
    def ignored(self) -> tuple[str, ...]:
        unused = ("multi_modal_projector.fine.*", "model.density_router.*", "mtp.*")
        return (*super().ignored, *unused)


MODEL_TYPES = {"granite_docling": GraniteDoclingForConditionalGeneration}
