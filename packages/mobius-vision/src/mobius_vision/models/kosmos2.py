"""Kosmos-2: CLIP's vision transformer, latent queries that cross-attend to it, an XGLM-like decoder.

The image features are the tower's ``last_hidden_state`` through ``post_layernorm`` (every
token), L2-normalised, projected by ``image_to_text_projection.dense``; then
``latent_query_num`` learned queries attend (``x_attn``, no mask) over the projected
tokens followed by the queries themselves. Their outputs, one row per query, are the
image's tokens.

Where they go is not an image token id: the processor writes ordinary vocabulary ids
(``<unk> + 1`` onwards) and says where the features go in ``image_embeds_position_mask``,
which the embedding graph takes (:mod:`mobius_vision.tasks.vision_language`,
``embedding_inputs``). The features replace the token embeddings there, before the
decoder's ``sqrt(hidden)`` scaling, as transformers does. The decoder is
:mod:`._kosmos2_text`; its ``position_ids`` are the table's rows, from ``pad_token_id + 1``.

In the module tree the tower is ``vision_tower`` (the checkpoint's ``vision_model.model.``),
the projection ``multi_modal_projector`` (``image_to_text_projection.``) and the decoder
``language_model`` (``text_model.``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, bidirectional_attention, module_scope
from mobius.errors import ConfigError
from mobius.tasks import INT64
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._kosmos2_text import Kosmos2TextConfig, Kosmos2TextForCausalLM
from mobius_vision.models._vl import VisionLanguageModel, flatten_images
from mobius_vision.models.clip import l2_normalize
from mobius_vision.models.clip_vision import CLIPVisionConfig, CLIPVisionTransformer

#: The processor's placement of the image features (1 where one goes), the embedding's input.
POSITION_MASK = "image_embeds_position_mask"


@dataclass
class Kosmos2Config(VisionLanguageConfig):
    latent_query_num: int = 64

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        queries = hf_config.latent_query_num
        if not isinstance(queries, int) or isinstance(queries, bool) or not 0 < queries <= 4096:
            raise ConfigError(
                f"kosmos-2 latent_query_num must be an int in [1, 4096], got {queries!r}"
            )
        vision = CLIPVisionConfig.from_hf(hf_config.vision_config)
        return dict(
            model_type=hf_config.model_type,
            vision=dataclasses.replace(vision, projection_dim=0),
            text=Kosmos2TextConfig.from_hf(cls.text_hf_config(hf_config)),
            image_token_id=-1,  # none: image_embeds_position_mask places the features
            latent_query_num=queries,
        )


class Kosmos2CrossAttention(nn.Module):
    """``x_attn``: the queries attend, unmasked, over the keys' sequence."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.q_proj = Linear(hidden, hidden, bias=True)
        self.k_proj = Linear(hidden, hidden, bias=True)
        self.v_proj = Linear(hidden, hidden, bias=True)
        self.out_proj = Linear(hidden, hidden, bias=True)
        self.num_heads, self.scale = heads, (hidden // heads) ** -0.5

    def forward(self, op, queries, keys):
        q, k, v = self.q_proj(op, queries), self.k_proj(op, keys), self.v_proj(op, keys)
        y = bidirectional_attention(op, q, k, v, None, self.num_heads, self.scale)
        return self.out_proj(op, y)


class Kosmos2ImageToTextProjection(nn.Module):
    """``dense``, ``latent_query`` and ``x_attn``: the checkpoint's names."""

    def __init__(self, config: Kosmos2Config) -> None:
        super().__init__()
        text = config.text.hidden_size
        self.dense = Linear(config.vision.hidden_size, text, bias=True)
        self.latent_query = nn.Parameter([config.latent_query_num, text])
        self.x_attn = Kosmos2CrossAttention(text, config.text.num_attention_heads)

    def forward(self, op, image_states):
        """``[images, latent_query_num, text_hidden]`` from the tower's normed states."""
        x = self.dense(op, image_states)  # [images, positions, text_hidden]
        images = op.Shape(x, start=0, end=1)
        shape = op.Concat(images, op.Constant(value_ints=[1, 1]), axis=0)
        queries = op.Expand(op.Unsqueeze(self.latent_query, [0]), shape)
        return self.x_attn(op, queries, op.Concat(x, queries, axis=1))


class Kosmos2ForConditionalGeneration(VisionLanguageModel):
    config_class = Kosmos2Config
    renames: ClassVar[dict[str, str]] = {
        "vision_model.model.": "vision_tower.",
        "image_to_text_projection.": "multi_modal_projector.",
        "text_model.": "language_model.",
    }

    def make_vision_tower(self, config: Kosmos2Config) -> nn.Module:
        return CLIPVisionTransformer(config.vision)  # Kosmos-2's tower is CLIP's, module for module

    def make_projector(self, config: Kosmos2Config) -> nn.Module:
        return Kosmos2ImageToTextProjection(config)

    def make_language_model(self, config: Kosmos2Config) -> nn.Module:
        return Kosmos2TextForCausalLM(config.text)

    def image_features(self, op, pixel_values):
        states = self.tower_states(op, pixel_values)[-1]  # last_hidden_state, every token
        with module_scope(op, self.vision_tower):
            states = self.vision_tower.post_layernorm(op, states)
        return flatten_images(op, self.multi_modal_projector(op, l2_normalize(op, states)))

    def embedding_inputs(self) -> list[tuple]:
        return [(POSITION_MASK, INT64, ["batch", "sequence"])]

    def embed(self, op, input_ids, image_features, position_mask):
        """Token embeddings, the image features where ``position_mask`` is 1 (in order), scaled."""
        decoder = self.language_model
        embedding = decoder.model.embed_tokens
        with module_scope(op, decoder, decoder.model, embedding):
            embeds = op.Gather(embedding.weight, input_ids, axis=0)  # [batch, sequence, hidden]
        # No features (a decode step, a prompt without an image): nothing is placed.
        rows = op.Shape(image_features, start=0, end=1)
        has_features = op.Squeeze(op.Greater(rows, op.Constant(value_ints=[0])), [0])
        placed = op.And(op.Cast(position_mask, to=ir.DataType.BOOL), has_features)
        positions = op.Transpose(op.NonZero(placed), perm=[1, 0])  # [image_tokens, 2]
        merged = op.ScatterND(embeds, positions, image_features)
        return op.Mul(merged, op.CastLike(op.Constant(value_float=embedding.scale), merged))


MODEL_TYPES = {"kosmos-2": Kosmos2ForConditionalGeneration}
