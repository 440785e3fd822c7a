"""Pegasus: pre-norm BART layers, fixed split sinusoids (no offset), no embedding LayerNorm."""

from __future__ import annotations

from mobius_text.models._sinusoids import split_sinusoids, supply_position_tables
from mobius_text.models.bart import (
    BartDecoder,
    BartEncoder,
    BartForConditionalGeneration,
    BartLearnedPositionalEmbedding,
    BartModel,
    PreNormDecoderLayer,
    PreNormEncoderLayer,
)


class SinusoidalPositions(BartLearnedPositionalEmbedding):
    """A fixed table read like a learned one, from row 0; computed when the checkpoint lacks it."""

    offset = 0


class PegasusEncoder(BartEncoder):
    layer_class = PreNormEncoderLayer
    positions_class = SinusoidalPositions
    embedding_norm = False
    final_norm = True


class PegasusDecoder(BartDecoder):
    layer_class = PreNormDecoderLayer
    positions_class = SinusoidalPositions
    embedding_norm = False
    final_norm = True


class PegasusModel(BartModel):
    encoder_class = PegasusEncoder
    decoder_class = PegasusDecoder


class PegasusForConditionalGeneration(BartForConditionalGeneration):
    model_class = PegasusModel

    def sanitize(self, weights: dict) -> dict:
        """BART's mapping, plus the position tables transformers computes at load."""
        weights = super().sanitize(weights)
        table = split_sinusoids(self.config.max_position_embeddings, self.config.hidden_size)
        return supply_position_tables(weights, table)


MODEL_TYPES = {"pegasus": PegasusForConditionalGeneration}
