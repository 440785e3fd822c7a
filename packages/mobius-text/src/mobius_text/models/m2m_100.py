"""M2M-100: pre-norm BART layers, scaled embeddings, fixed sinusoids at padding-aware positions.

Positions count from ``pad_token_id + 1`` over the non-pad tokens and continue
from the cache length in the decoder; a pad token sits at ``pad_token_id``, whose
table row is zero. The table (never in checkpoints) is computed as transformers does.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius_text.models._sinusoids import supply_position_tables, tensor2tensor_sinusoids
from mobius_text.models.bart import (
    BartForConditionalGeneration,
    BartModel,
    PositionsFromRowZero,
)
from mobius_text.models.blenderbot import BlenderbotDecoder, BlenderbotEncoder

OFFSET = 2  # fairseq's table has two rows before the first position


def padding_aware_positions(op, input_ids, padding_idx: int, past_length):
    """``[batch, seq]``: ``(cumsum(real) + past) * real + padding_idx``, real = not a pad token."""
    pad = op.Constant(value=ir.tensor(padding_idx, dtype=ir.DataType.INT64))
    real = op.Cast(op.Not(op.Equal(input_ids, pad)), to=ir.DataType.INT64)
    counts = op.Add(op.CumSum(real, op.Constant(value_int=1)), past_length)
    return op.Add(op.Mul(counts, real), pad)


class M2M100PositionalEmbedding(PositionsFromRowZero):
    def __init__(self, num_positions: int, dim: int, padding_idx: int | None = None) -> None:
        super().__init__(num_positions + OFFSET, dim)
        self.padding_idx = padding_idx


class M2M100Encoder(BlenderbotEncoder):
    positions_class = M2M100PositionalEmbedding

    def position_ids(self, op, input_ids, past_length):
        return padding_aware_positions(op, input_ids, self.embed_positions.padding_idx, past_length)


class M2M100Decoder(BlenderbotDecoder):
    positions_class = M2M100PositionalEmbedding
    position_ids = M2M100Encoder.position_ids


class M2M100Model(BartModel):
    encoder_class = M2M100Encoder
    decoder_class = M2M100Decoder


class M2M100ForConditionalGeneration(BartForConditionalGeneration):
    model_class = M2M100Model
    logits_bias = False

    def sanitize(self, weights: dict) -> dict:
        """BART's mapping, plus the position tables transformers computes at load."""
        weights = super().sanitize(weights)
        config = self.config
        rows = config.max_position_embeddings + OFFSET
        table = tensor2tensor_sinusoids(rows, config.hidden_size, config.pad_token_id)
        return supply_position_tables(weights, table)


MODEL_TYPES = {"m2m_100": M2M100ForConditionalGeneration}
