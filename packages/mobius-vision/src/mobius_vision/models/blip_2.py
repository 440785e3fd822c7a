"""BLIP-2: BLIP's ViT, a Q-Former of learned queries, a linear projection, a decoder-only LM.

The vision tower's normed states are read by ``num_query_tokens`` learned queries
through the Q-Former (:mod:`._qformer`); their final states, projected by
``language_projection`` to the decoder's width, are the image features, one row per
query. The processor puts ``num_query_tokens`` image tokens before the prompt (before
the BOS). The text decoder is whatever mobius-text registers for
``text_config.model_type`` (OPT in the hub's checkpoints). BLIP-2 over Flan-T5 is an
encoder–decoder over images, a contract mobius-vision does not have yet: refused.

In the module tree the Q-Former, its queries and the projection sit under
``multi_modal_projector`` (the checkpoint's ``qformer.``, ``query_tokens`` and
``language_projection.``), the tower under ``vision_tower``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from onnxscript import nn

from mobius.components import Blip2QFormerModel, Linear, QFormerConfig, module_scope
from mobius.config import first_of
from mobius.errors import ConfigError
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._compose import _module_path, embeddings_given, merge_image_features
from mobius_vision.models._vl import VisionLanguageModel, flatten_images


@dataclass
class Blip2Config(VisionLanguageConfig):
    num_query_tokens: int = 32
    qformer: QFormerConfig | None = None
    #: Whether the Q-Former reads the instruction (InstructBLIP's does).
    qformer_text_input: ClassVar[bool] = False

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if not getattr(hf_config, "use_decoder_only_language_model", True):
            raise ConfigError(
                f"{hf_config.model_type} over an encoder-decoder language model "
                f"({hf_config.text_config.model_type}) is not supported yet: only decoder-only "
                "language models (OPT...)"
            )
        if first_of(hf_config, "image_token_id", "image_token_index", default=None) is None:
            raise ConfigError(
                f"{hf_config.model_type} config has no image_token_index: the checkpoint "
                "predates transformers' image tokens; re-save it with a current processor"
            )
        return dict(
            super().hf_fields(hf_config),
            num_query_tokens=int(hf_config.num_query_tokens),
            qformer=QFormerConfig.from_hf(hf_config.qformer_config, cls.qformer_text_input),
        )


class Blip2Projector(nn.Module):
    """``query_tokens``, the ``qformer`` and ``language_projection``: the checkpoint's names."""

    qformer_class = Blip2QFormerModel

    def __init__(self, config: Blip2Config) -> None:
        super().__init__()
        qformer = config.qformer
        self.num_queries = config.num_query_tokens
        self.query_tokens = nn.Parameter([1, config.num_query_tokens, qformer.hidden_size])
        self.qformer = self.qformer_class(qformer)
        self.language_projection = Linear(qformer.hidden_size, config.text.hidden_size, bias=True)

    def queries(self, op, image_states):
        """The learned queries, one copy per image ``[images, queries, hidden]``."""
        images = op.Shape(image_states, start=0, end=1)
        shape = op.Concat(images, op.Constant(value_ints=[1, 1]), axis=0)
        return op.Expand(self.query_tokens, shape)

    def forward(self, op, image_states):
        queries = self.qformer(op, self.queries(op, image_states), image_states, self.num_queries)
        return self.language_projection(op, queries)


class Blip2ForConditionalGeneration(VisionLanguageModel):
    config_class = Blip2Config
    projector_class = Blip2Projector
    renames: ClassVar[dict[str, str]] = {
        "vision_model.": "vision_tower.",
        "query_tokens": "multi_modal_projector.query_tokens",
        "qformer.": "multi_modal_projector.qformer.",
        "language_projection.": "multi_modal_projector.language_projection.",
    }

    @property
    def embedding_path(self) -> str:
        """Where the decoder keeps its token embedding (OPT: ``model.decoder.embed_tokens``)."""
        backbone = self.language_model.model
        return (
            "model.decoder.embed_tokens" if hasattr(backbone, "decoder") else "model.embed_tokens"
        )

    def make_projector(self, config: Blip2Config) -> nn.Module:
        return self.projector_class(config)

    def image_features(self, op, pixel_values):
        states, _ = self.vision_tower(op, pixel_values)  # [images, positions, vision_hidden]
        return flatten_images(op, self.multi_modal_projector(op, states))

    def embed(self, op, input_ids, image_features):
        *path, embedding = _module_path(self.language_model, self.embedding_path)
        with module_scope(op, self.language_model, *path):
            embeds = embedding(op, input_ids)  # [batch, sequence, hidden]
        return merge_image_features(
            op, embeds, input_ids, image_features, self.config.image_token_id
        )

    def decode(self, op, inputs_embeds, attention_mask, position_ids, past_key_values):
        with embeddings_given(op, self.language_model, self.embedding_path):
            return self.language_model(
                op, inputs_embeds, attention_mask, position_ids, past_key_values
            )


MODEL_TYPES = {"blip-2": Blip2ForConditionalGeneration}
