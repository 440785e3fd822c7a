"""T5's encoder alone (``T5EncoderModel``, ``UMT5EncoderModel``): token states for feature extraction.

Diffusion pipelines (Flux, SD3, PixArt) read T5's encoder states as their text
conditioning; their checkpoints hold only ``shared`` and ``encoder.*``. The
registration key is the transformers architecture class (``config.json``'s
``architectures`` names it), since the ``model_type`` ``t5`` is the full
encoder–decoder. The stack is :mod:`mobius_text.models.t5`'s, unchanged; the graph is
:class:`mobius.tasks.FeatureExtractionTask`'s (``last_hidden_state``, pooled by the
task for ``--head sentence-embedding``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from mobius.components import Embedding, Linear, padding_bias
from mobius.config import EncoderConfig
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_text.models.t5 import T5Config, T5Stack, UMT5Stack, _length, _positions

#: Heads a bare encoder builds: its states, or them pooled by the task.
ENCODER_ONLY_HEADS = ("none", "sentence-embedding")


def check_encoder_only_head(config: EncoderConfig, family: str) -> None:
    """Refuse a head (``--head masked-lm``...) that a bare ``family`` encoder has no weights for."""
    if config.head not in ENCODER_ONLY_HEADS:
        raise ConfigError(
            f"--head {config.head} does not apply to a {family} encoder; choose "
            f"{' or '.join(ENCODER_ONLY_HEADS)}"
        )


@dataclass
class T5EncoderConfig(EncoderConfig):
    """The feature-extraction fields (head, pooling) around the T5 config the stack reads."""

    t5: T5Config | None = None

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        t5 = T5Config.from_hf(hf_config)
        return dict(
            model_type=hf_config.model_type,
            vocab_size=t5.vocab_size,
            hidden_size=t5.hidden_size,
            intermediate_size=t5.intermediate_size,
            num_hidden_layers=t5.num_layers,
            num_attention_heads=t5.num_heads,
            layer_norm_eps=t5.eps,
            pad_token_id=t5.pad_token_id,
            num_labels=hf_config.num_labels,  # the token classifier's (a checked int)
            t5=t5,
        )


class T5EncoderModel(Model):
    """``shared`` embeddings and the ``encoder`` stack: ``last_hidden_state``."""

    config_class = T5EncoderConfig
    task = "feature-extraction"
    uses_token_type_ids = False
    stack_class = T5Stack

    def __init__(self, config: T5EncoderConfig) -> None:
        super().__init__()
        check_encoder_only_head(config, "T5")
        self.config = config
        self.shared = Embedding(config.vocab_size, config.hidden_size)
        self.encoder = self.stack_class(config.t5, is_decoder=False)

    def forward(self, op, input_ids, attention_mask, token_type_ids=None):
        x = self.shared(op, input_ids)  # [batch, seq, hidden]
        positions = _positions(op, _length(op, input_ids, 1))
        mask = padding_bias(op, attention_mask, x.dtype)  # [batch, 1, seq, seq]
        hidden, _ = self.encoder(op, x, mask, positions, positions)
        return {"last_hidden_state": hidden}

    def sanitize(self, weights: dict) -> dict:
        """The stack's embedding is ``shared`` (saved tied, or under both names)."""
        embed = weights.pop("encoder.embed_tokens.weight", None)
        if embed is not None:
            weights.setdefault("shared.weight", embed)
        return weights


class UMT5EncoderModel(T5EncoderModel):
    """UMT5's encoder: a relative position table in every block."""

    stack_class = UMT5Stack


class T5ForTokenClassification(Model):
    """``T5ForTokenClassification``: the encoder under ``transformer.``, ``classifier`` per token."""

    config_class = T5EncoderConfig
    task = "feature-extraction"
    uses_token_type_ids = False
    encoder_class = T5EncoderModel

    def __init__(self, config: T5EncoderConfig) -> None:
        super().__init__()
        if config.head != "token-classification":
            raise ConfigError(
                f"--head {config.head}: {type(self).__name__} builds token-classification"
            )
        self.config = config
        self.transformer = self.encoder_class(dataclasses.replace(config, head="none"))
        self.classifier = Linear(config.hidden_size, config.num_labels, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids=None):
        hidden = self.transformer(op, input_ids, attention_mask)["last_hidden_state"]
        return {"last_hidden_state": hidden, "logits": self.classifier(op, hidden)}

    def sanitize(self, weights: dict) -> dict:
        """The encoder's tensors as :class:`T5EncoderModel` reads them, under ``transformer.``."""
        prefix = "transformer."
        inner = {k.removeprefix(prefix): v for k, v in weights.items() if k.startswith(prefix)}
        rest = {k: v for k, v in weights.items() if not k.startswith(prefix)}
        inner = self.transformer.sanitize(inner)
        return {**rest, **{prefix + k: v for k, v in inner.items()}}


class UMT5ForTokenClassification(T5ForTokenClassification):
    """UMT5's encoder with ``classifier`` per token."""

    encoder_class = UMT5EncoderModel


MODEL_TYPES = {
    "T5EncoderModel": T5EncoderModel,
    "UMT5EncoderModel": UMT5EncoderModel,
    "T5ForTokenClassification": T5ForTokenClassification,
    "UMT5ForTokenClassification": UMT5ForTokenClassification,
}
