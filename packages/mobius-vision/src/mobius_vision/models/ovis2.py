"""Ovis2: image tokens as soft lookups into a visual vocabulary, over any text decoder (Qwen2).

The tower (:mod:`._ovis2_vision`) gives each image's ``hidden_stride``-strided patches
as logits over the visual vocabulary less its indicator tokens; their softmax (padded
with zeros for the indicators) times ``visual_embeddings_table`` is an image token's
embedding. The indicator tokens the processor writes around the atoms (``<IMG_START>``,
``<IMG_GRID>``, ``<IMG_COL>``, ``<IMG_ROW>``, ``<IMG_END>``: ``visual_indicator_token_ids``)
take the table's last rows instead of their text embeddings, on a prompt with images
only, as transformers does.

In the split form the vision graph also writes ``indicator_features [indicators,
text_hidden]`` (no rows without images), which the embedding graph takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.errors import ConfigError
from mobius_vision.config import VisionLanguageConfig, composed_config
from mobius_vision.models._ovis2_vision import Ovis2VisionConfig, Ovis2VisionModel
from mobius_vision.models._vl import VisionLanguageModel, flatten_images, text_decoder


@dataclass
class Ovis2Config(VisionLanguageConfig):
    visual_indicator_token_ids: tuple[int, ...] = ()

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        vision = Ovis2VisionConfig.from_hf(hf_config.vision_config)
        text = composed_config(cls.text_hf_config(hf_config))
        ids = tuple(hf_config.visual_indicator_token_ids)
        if len(ids) != vision.num_visual_indicator_tokens or not all(
            isinstance(i, int) and 0 <= i < text.vocab_size for i in ids
        ):
            raise ConfigError(
                f"ovis2: visual_indicator_token_ids {list(ids)} must be "
                f"{vision.num_visual_indicator_tokens} token ids of the vocabulary"
            )
        for name in ("vocab_size", "hidden_size"):  # transformers' lm_head reads the top level
            top = getattr(hf_config, name, None)
            if top is not None and top != getattr(text, name):
                raise ConfigError(f"ovis2: {name} {top} differs from the text decoder's")
        return dict(
            model_type=hf_config.model_type,
            vision=vision,
            text=text,
            image_token_id=int(hf_config.image_token_id),
            visual_indicator_token_ids=ids,
        )


class VisualEmbeddingTable(nn.Module):
    """``weight [visual vocab, text hidden]``: the image tokens' embeddings from the tower's
    logits, and the indicator tokens' (its last rows)."""

    def __init__(self, vocab_size: int, indicators: int, hidden: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([vocab_size, hidden])
        self.visual = vocab_size - indicators

    def forward(self, op, logits):
        """``(softmax(logits) @ rows, indicator rows)``: the softmax padded with zeros for the
        indicators selects nothing of their rows, so it reads the rows before them."""
        split = op.Constant(value_ints=[self.visual])
        rows = op.Slice(self.weight, op.Constant(value_ints=[0]), split)
        indicators = op.Slice(self.weight, split, op.Constant(value_ints=[1 << 62]))
        return op.MatMul(op.Softmax(logits, axis=-1), rows), indicators


class Ovis2ForConditionalGeneration(VisionLanguageModel):
    """``vision_tower``, ``visual_embeddings_table`` and ``language_model``."""

    config_class = Ovis2Config
    renames = {
        "model.vision_tower.": "vision_tower.",
        "model.visual_embeddings_table.": "visual_embeddings_table.",
        "model.language_model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
    }

    def __init__(self, config: Ovis2Config) -> None:
        nn.Module.__init__(self)
        self.config = config
        vision = config.vision
        self.vision_tower = Ovis2VisionModel(vision)
        self.visual_embeddings_table = VisualEmbeddingTable(
            vision.vocab_size, vision.num_visual_indicator_tokens, config.text.hidden_size
        )
        self.language_model = text_decoder(config.text)

    def vision_modules(self) -> list[nn.Module]:
        return [self.vision_tower, self.visual_embeddings_table]

    def vision_outputs(self) -> list[tuple]:
        hidden = self.config.text.hidden_size
        return [
            ("image_features", ["num_image_tokens", hidden]),
            ("indicator_features", ["num_indicators", hidden]),
        ]

    def image_features(self, op, pixel_values):
        logits = self.vision_tower(op, pixel_values)  # [images, tokens, visual]
        features, indicators = self.visual_embeddings_table(op, logits)
        return flatten_images(op, features), indicators

    def embed(self, op, input_ids, image_features, indicator_features):
        embeds = super().embed(op, input_ids, image_features)  # [batch, sequence, hidden]
        # No indicator rows (no image): the indicator ids embed as text, as in transformers.
        # Zeros appended keep the row lookups valid then; the mask says which apply.
        count = len(self.config.visual_indicator_token_ids)
        has_rows = op.Greater(op.Shape(indicator_features, start=0, end=1), [0])
        zeros = op.Expand(
            op.CastLike(op.Constant(value_float=0.0), embeds),
            op.Concat(op.Constant(value_ints=[count]), op.Shape(embeds, start=2), axis=0),
        )
        rows = op.Concat(indicator_features, zeros, axis=0)  # [indicators (+ count), hidden]
        for i, token in enumerate(self.config.visual_indicator_token_ids):
            here = op.And(op.Equal(input_ids, op.Constant(value_int=token)), has_rows)
            row = op.Gather(rows, op.Constant(value_int=i), axis=0)  # [hidden]
            embeds = op.Where(op.Unsqueeze(here, [2]), row, embeds)
        return embeds

    @property
    def ignored(self) -> tuple[str, ...]:
        return (*super().ignored, "vision_tower.transformer.embeddings.position_ids")


MODEL_TYPES = {"ovis2": Ovis2ForConditionalGeneration}
