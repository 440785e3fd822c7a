"""T5Gemma's encoder alone (``T5GemmaEncoderModel``): token states for feature extraction.

PRX (Photon) conditions its transformer on T5Gemma's encoder states. The stack is
:class:`mobius_text.models.t5gemma.T5GemmaEncoder`, unchanged (bidirectional, with
its windowed layers); the graph is :class:`mobius.tasks.FeatureExtractionTask`'s.
The registration key is transformers' class, since the ``model_type`` ``t5gemma``
is the encoder–decoder. ``T5GemmaEncoderModel`` saves a ``t5gemma`` config and the
stack under ``encoder.*``. The bare ``T5GemmaEncoder`` (the class a PRX pipeline
names, which transformers does not export) saves its stack's own config
(``t5_gemma_module``) and ``embed_tokens.*``, ``layers.*``, ``norm.*``: it builds with
``--model-type T5GemmaEncoderModel``, its names read under ``encoder.``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mobius.config import EncoderConfig
from mobius.model import Model
from mobius_text.models.gemma2 import Gemma2Config
from mobius_text.models.t5_encoder import check_encoder_only_head
from mobius_text.models.t5gemma import T5GemmaConfig, T5GemmaEncoder


@dataclass
class T5GemmaEncoderConfig(EncoderConfig):
    """The feature-extraction fields (head, pooling) around the encoder stack's Gemma 2 config."""

    encoder: Gemma2Config | None = None

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if hasattr(hf_config, "encoder"):
            encoder = T5GemmaConfig.from_hf(hf_config).encoder
        else:  # a bare T5GemmaEncoder saves its stack's own config (t5_gemma_module)
            encoder = Gemma2Config.from_hf(hf_config)
        return dict(
            model_type=hf_config.model_type,
            vocab_size=encoder.vocab_size,
            hidden_size=encoder.hidden_size,
            intermediate_size=encoder.intermediate_size,
            num_hidden_layers=encoder.num_hidden_layers,
            num_attention_heads=encoder.num_attention_heads,
            pad_token_id=getattr(hf_config, "pad_token_id", None),
            encoder=encoder,
        )


class T5GemmaEncoderModel(Model):
    """The ``encoder`` stack: ``last_hidden_state``."""

    config_class = T5GemmaEncoderConfig
    task = "feature-extraction"

    def __init__(self, config: T5GemmaEncoderConfig) -> None:
        super().__init__()
        check_encoder_only_head(config, "T5Gemma")
        self.config = config
        self.encoder = T5GemmaEncoder(config.encoder)

    def forward(self, op, input_ids, attention_mask, token_type_ids=None):
        return {"last_hidden_state": self.encoder(op, input_ids, attention_mask)}

    def sanitize(self, weights: dict) -> dict:
        """A bare ``T5GemmaEncoder``'s names get the ``encoder.`` prefix."""
        return {
            name if name.startswith("encoder.") else f"encoder.{name}": tensor
            for name, tensor in weights.items()
        }


MODEL_TYPES = {"T5GemmaEncoderModel": T5GemmaEncoderModel}
