"""Molmo2: crops through a ViT, patches pooled by attention, features added to the placeholders.

- Vision graph inputs: ``pixel_values [crops, patches, patch * patch * channels]`` (the
  processor's patches, every image's crops in order) and ``image_token_pooling [tokens,
  pool]`` int64: per image token, the (global) indices of the patches it pools, ``-1``
  for none.
- The tower (:mod:`._molmo2_vision`) keeps the outputs of the layers
  ``adapter_config.vision_feature_layer`` names, concatenated on the feature axis.
- The adapter (``multi_modal_projector``) gathers each token's patches, averages the
  valid ones into a query, attends from it over them (``image_pooling_2d``), then a gated
  MLP (``image_projector``) maps to the text width. Tokens that pool no patch are dropped.
- The features are *added* to the embeddings of the ``<im_patch>`` tokens (``image_patch_id``).
- In the prefill, every image token (``<im_patch>``, ``<im_col>`` and the start and end
  markers) sees every other one both ways, as transformers' ``mm_token_type_ids`` mask
  does. The image tokens are those from a start marker (``image_start_token_id``,
  ``low_res_image_start_token_id``, ``frame_start_token_id``) to the next end marker
  inclusive, read off the ids by the embedding graph, which writes ``image_token_mask``
  ``[batch, sequence]`` (1.0 on image tokens) for the decoder.

The decoder is mobius-text's ``molmo2_text`` (:mod:`mobius_text.models.molmo2_text`). The
checkpoint may be in the hub layout (``model.transformer``, ``model.vision_backbone``) or
transformers' (``model.language_model``...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Linear,
    bidirectional_blocks,
    get_activation,
    lowest_value,
    module_scope,
)
from mobius.errors import ConfigError
from mobius_text.models.molmo2_text import Molmo2TextConfig, Molmo2TextForCausalLM
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._compose import merge_image_features
from mobius_vision.models._molmo2_vision import (
    Molmo2Attention,
    Molmo2VisionConfig,
    Molmo2VisionTower,
    positive_count,
)
from mobius_vision.models._vl import VisionLanguageModel

#: The hub layout's names (regex, replacement), applied in order, to the module tree's.
HUB_NAMES = (
    (r"^model\.vision_backbone\.image_vit\.transformer\.resblocks\.", "vision_tower.layers."),
    (r"^model\.vision_backbone\.image_vit\.", "vision_tower."),
    (r"^model\.vision_backbone\.", "multi_modal_projector."),
    (r"\.attention\.w([qkvo])\.", r".self_attn.\1_proj."),
    (r"\.feed_forward\.w([12])\.", r".mlp.fc\1."),
    (r"\.attention_norm\.", ".layer_norm1."),
    (r"\.ffn_norm\.", ".layer_norm2."),
    (r"image_pooling_2d\.w([qkvo])\.", r"image_pooling_2d.\1_proj."),
    (r"image_projector\.w1\.", "image_projector.gate_proj."),
    (r"image_projector\.w2\.", "image_projector.down_proj."),
    (r"image_projector\.w3\.", "image_projector.up_proj."),
    (r"^model\.transformer\.", "model.language_model."),
)


def _token_id(value, what: str, vocab: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < vocab:
        raise ConfigError(f"molmo2: {what} {value!r} is not a token id of the vocabulary")
    return value


@dataclass
class Molmo2Config(VisionLanguageConfig):
    vision_feature_layer: tuple[int, ...] = (-1,)
    adapter_heads: int = 16
    adapter_kv_heads: int = 16
    adapter_head_dim: int = 72
    adapter_hidden_size: int = 1152
    adapter_intermediate_size: int = 18944
    adapter_act: str = "silu"
    adapter_attention_bias: bool = True
    adapter_mlp_bias: bool = False
    start_token_ids: tuple[int, ...] = ()
    end_token_ids: tuple[int, ...] = ()

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        vision = Molmo2VisionConfig.from_hf(hf_config.vision_config)
        text = Molmo2TextConfig.from_hf(cls.text_hf_config(hf_config))
        adapter = hf_config.adapter_config
        layers = tuple(adapter.vision_feature_layer)
        n = vision.num_hidden_layers
        if not layers or not all(isinstance(i, int) and -n <= i < n for i in layers):
            raise ConfigError(f"molmo2: vision_feature_layer {list(layers)} must index {n} layers")
        if adapter.hidden_size != vision.hidden_size:  # transformers sizes the pooling so
            raise ConfigError(
                f"molmo2: adapter hidden_size {adapter.hidden_size} differs from the tower's "
                f"{vision.hidden_size}"
            )
        if adapter.text_hidden_size != text.hidden_size:
            raise ConfigError(
                f"molmo2: adapter text_hidden_size {adapter.text_hidden_size} differs from the "
                f"decoder's hidden_size {text.hidden_size}"
            )
        rows = text.vocab_size + text.additional_vocab_size
        starts = ("image_start_token_id", "low_res_image_start_token_id", "frame_start_token_id")
        ends = ("image_end_token_id", "frame_end_token_id")
        return dict(
            model_type=hf_config.model_type,
            vision=vision,
            text=text,
            image_token_id=_token_id(hf_config.image_patch_id, "image_patch_id", rows),
            vision_feature_layer=layers,
            adapter_heads=positive_count(
                adapter.num_attention_heads, "molmo2: adapter num_attention_heads"
            ),
            adapter_kv_heads=positive_count(
                adapter.num_key_value_heads, "molmo2: adapter num_key_value_heads"
            ),
            adapter_head_dim=positive_count(adapter.head_dim, "molmo2: adapter head_dim"),
            adapter_hidden_size=adapter.hidden_size,
            adapter_intermediate_size=positive_count(
                adapter.intermediate_size, "molmo2: adapter intermediate_size"
            ),
            adapter_act=adapter.hidden_act,
            adapter_attention_bias=bool(adapter.attention_bias),
            adapter_mlp_bias=bool(adapter.mlp_bias),
            start_token_ids=tuple(_token_id(getattr(hf_config, k), k, rows) for k in starts),
            end_token_ids=tuple(_token_id(getattr(hf_config, k), k, rows) for k in ends),
        )


class ImageProjector(nn.Module):
    """A gated MLP from the adapter's width to the text decoder's (``down_proj`` never biased)."""

    def __init__(self, config: Molmo2Config) -> None:
        super().__init__()
        width, inner, bias = (
            config.adapter_hidden_size,
            config.adapter_intermediate_size,
            config.adapter_mlp_bias,
        )
        self.gate_proj, self.up_proj = Linear(width, inner, bias), Linear(width, inner, bias)
        self.down_proj = Linear(inner, config.text.hidden_size, False)
        self.act = get_activation(config.adapter_act)

    def forward(self, op, x):
        gated = op.Mul(self.act(op, self.gate_proj(op, x)), self.up_proj(op, x))
        return self.down_proj(op, gated)


class Molmo2Adapter(nn.Module):
    """HF ``Molmo2Adapter``: attention pooling of each token's patches, then a gated MLP."""

    def __init__(self, config: Molmo2Config) -> None:
        super().__init__()
        width = config.adapter_hidden_size * len(config.vision_feature_layer)
        self.image_pooling_2d = Molmo2Attention(
            width,
            config.adapter_hidden_size,
            config.adapter_heads,
            config.adapter_kv_heads,
            config.adapter_head_dim,
            config.adapter_attention_bias,
        )
        self.image_projector = ImageProjector(config)

    def forward(self, op, features, pooling):
        """``features [crops, patches, width]``, ``pooling [tokens, pool]`` -> ``[kept tokens, text]``."""
        flat = op.Reshape(features, op.Concat([-1], op.Shape(features, start=2), axis=0))
        valid = op.GreaterOrEqual(pooling, op.Constant(value_int=0))  # [tokens, pool]
        index = op.Max(pooling, op.Constant(value_int=0))
        patches = op.Gather(flat, index, axis=0)  # [tokens, pool, width]
        weights = op.CastLike(valid, patches)
        patches = op.Mul(patches, op.Unsqueeze(weights, [2]))
        count = op.ReduceSum(weights, [1], keepdims=1)  # [tokens, 1]
        count = op.Max(count, op.CastLike(op.Constant(value_float=1.0), count))
        query = op.Div(op.ReduceSum(patches, [1], keepdims=1), op.Unsqueeze(count, [2]))
        low = op.CastLike(op.Constant(value_float=lowest_value(features.dtype)), patches)
        zero = op.CastLike(op.Constant(value_float=0.0), patches)
        mask = op.Unsqueeze(op.Where(valid, zero, low), [1, 2])  # [tokens, 1, 1, pool]
        pooled = op.Squeeze(self.image_pooling_2d(op, query, patches, mask), [1])
        kept = op.Cast(
            op.ReduceMax(op.Cast(valid, to=ir.DataType.INT64), [1], keepdims=0), to=ir.DataType.BOOL
        )
        return op.Compress(self.image_projector(op, pooled), kept, axis=0)


class Molmo2ForConditionalGeneration(VisionLanguageModel):
    """``vision_tower``, ``multi_modal_projector`` (the adapter) and ``language_model``."""

    config_class = Molmo2Config

    def __init__(self, config: Molmo2Config) -> None:
        nn.Module.__init__(self)
        self.config = config
        n = config.vision.num_hidden_layers
        # the hidden_states transformers reads: [layer + 1] counted from zero, [layer] from the end
        self.feature_states = [i + 1 if i >= 0 else n + 1 + i for i in config.vision_feature_layer]
        # only the layers whose outputs are read (transformers runs the rest for nothing)
        self.vision_tower = Molmo2VisionTower(config.vision, max(self.feature_states))
        self.multi_modal_projector = Molmo2Adapter(config)
        self.language_model = Molmo2TextForCausalLM(config.text)

    def vision_inputs(self, dtype) -> list[tuple]:
        v = self.config.vision
        pixels = v.patch_size * v.patch_size * v.num_channels
        return [
            ("pixel_values", dtype, ["num_crops", v.num_position_embeddings, pixels]),
            ("image_token_pooling", ir.DataType.INT64, ["num_pooled", "pool"]),
        ]

    def image_features(self, op, pixel_values, image_token_pooling):
        states = self.tower_states(op, pixel_values)
        features = op.Concat(*(states[i] for i in self.feature_states), axis=-1)
        return self.multi_modal_projector(op, features, image_token_pooling)

    def embedding_outputs(self) -> list[tuple]:
        return [("image_token_mask", ["batch", "sequence"])]

    def embed(self, op, input_ids, image_features):
        """Features added at the ``<im_patch>`` tokens; the image-token mask beside them."""
        decoder = self.language_model
        with module_scope(op, decoder, decoder.model):
            embeds = decoder.model.embed_tokens(op, input_ids)  # [batch, sequence, hidden]
        zeros = op.Mul(embeds, op.CastLike(op.Constant(value_float=0.0), embeds))
        added = merge_image_features(
            op, zeros, input_ids, image_features, self.config.image_token_id
        )
        return op.Add(embeds, added), op.CastLike(self._image_tokens(op, input_ids), embeds)

    def _image_tokens(self, op, input_ids):
        """``[batch, sequence]`` bool: the tokens from a start marker to its end marker."""

        def marks(ids):
            hits = [op.Equal(input_ids, op.Constant(value_int=i)) for i in ids]
            any_hit = hits[0]
            for hit in hits[1:]:
                any_hit = op.Or(any_hit, hit)
            return op.Cast(any_hit, to=ir.DataType.INT64)

        starts, ends = marks(self.config.start_token_ids), marks(self.config.end_token_ids)
        axis = op.Constant(value_int=1)
        opened = op.CumSum(starts, axis)
        closed_before = op.CumSum(ends, axis, exclusive=1)
        return op.Greater(opened, closed_before)

    def decode(self, op, inputs_embeds, attention_mask, position_ids, past, image_token_mask):
        image = op.Greater(
            image_token_mask, op.CastLike(op.Constant(value_float=0.5), image_token_mask)
        )
        blocks = op.Where(image, op.Constant(value_int=0), op.Constant(value_int=-1))
        with bidirectional_blocks(blocks):  # one block: all image tokens of a prompt
            return super().decode(op, inputs_embeds, attention_mask, position_ids, past)

    @property
    def ignored(self) -> tuple[str, ...]:
        # the tower layers after the last one read, which transformers runs for nothing
        unread = range(len(self.vision_tower.layers), self.config.vision.num_hidden_layers)
        return (*super().ignored, *(f"vision_tower.layers.{i}.*" for i in unread))

    def sanitize(self, weights: dict) -> dict:
        """The hub layout's names (:data:`HUB_NAMES`) first, then the usual renames."""
        renamed = {}
        for name, tensor in weights.items():
            for pattern, replacement in HUB_NAMES:
                name = re.sub(pattern, replacement, name)
            renamed[name] = tensor
        return super().sanitize(renamed)


MODEL_TYPES = {"molmo2": Molmo2ForConditionalGeneration}
