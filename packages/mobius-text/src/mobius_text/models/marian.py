"""Marian (OPUS-MT): post-norm BART layers, fixed split sinusoids, scaled embeddings, no embedding norm.

The decoder may have its own vocabulary (``decoder_vocab_size``) and embeddings
(``share_encoder_decoder_embeddings=False``); the head is tied to the decoder's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mobius.components import Embedding
from mobius_text.models._sinusoids import split_sinusoids, supply_position_tables
from mobius_text.models.bart import (
    BartConfig,
    BartDecoder,
    BartEncoder,
    BartForCausalLM,
    BartForConditionalGeneration,
    BartModel,
    PositionsFromRowZero,
)


@dataclass
class MarianConfig(BartConfig):
    """``vocab_size`` is the decoder's (the logits'); ``source_vocab_size`` the encoder's."""

    source_vocab_size: int = 0

    @classmethod
    def from_hf(cls, hf: Any) -> MarianConfig:
        base = BartConfig.from_hf(hf)
        shared = getattr(hf, "share_encoder_decoder_embeddings", True)
        target = hf.vocab_size if shared else (hf.decoder_vocab_size or hf.vocab_size)
        return cls(**{**vars(base), "vocab_size": target, "source_vocab_size": hf.vocab_size})


class MarianEncoder(BartEncoder):
    positions_class = PositionsFromRowZero
    embedding_norm = False

    def __init__(self, config: MarianConfig) -> None:
        super().__init__(config)
        self.embed_tokens = Embedding(config.source_vocab_size, config.hidden_size)


class MarianDecoder(BartDecoder):
    positions_class = PositionsFromRowZero
    embedding_norm = False


class MarianModel(BartModel):
    encoder_class = MarianEncoder
    decoder_class = MarianDecoder


class MarianMTModel(BartForConditionalGeneration):
    config_class = MarianConfig
    model_class = MarianModel

    def sanitize(self, weights: dict) -> dict:
        """BART's mapping, plus the position tables (never saved: transformers computes them)."""
        weights = super().sanitize(weights)
        table = split_sinusoids(self.config.max_position_embeddings, self.config.hidden_size)
        return supply_position_tables(weights, table)


class MarianForCausalLM(BartForCausalLM):
    config_class = MarianConfig
    seq2seq_class = MarianMTModel

    def sanitize(self, weights: dict) -> dict:
        """BART's mapping, plus the decoder's position table (never saved)."""
        weights = super().sanitize(weights)
        table = split_sinusoids(self.config.max_position_embeddings, self.config.hidden_size)
        return supply_position_tables(weights, table, stacks=("decoder",))


MODEL_TYPES = {"marian": MarianMTModel, "MarianForCausalLM": MarianForCausalLM}
