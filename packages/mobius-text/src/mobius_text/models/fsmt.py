"""FSMT (fairseq's WMT19 transformers): post-norm BART layers with fairseq's embeddings and head.

Source and target have their own vocabularies (``src_vocab_size``, ``tgt_vocab_size``:
the logits'); embeddings are scaled, not normalised. Positions are fairseq's: a
sinusoid table of ``max_position_embeddings + pad_token_id + 1`` rows (the pad row
zero) read at ``cumsum(real) * real + pad_token_id + past``, real = not a pad token,
so pad tokens sit at ``pad_token_id + past``; checkpoints carry the table, and
``sanitize`` computes it where one does not. The decoder ends in its own
``output_projection`` (no final norm, no ``final_logits_bias``); with
``tie_word_embeddings`` it and the encoder's embeddings are the decoder's embeddings.
The decoder is causal, as fairseq trains it (transformers' cached decoding drops the
causal mask, which only a decoder prompt of several tokens would see).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from mobius.components import Embedding, Linear, TiedLMHead, module_scope
from mobius_text.models._sinusoids import supply_position_tables, tensor2tensor_sinusoids
from mobius_text.models.bart import (
    BartConfig,
    BartDecoder,
    BartEncoder,
    BartForConditionalGeneration,
    BartModel,
    PositionsFromRowZero,
)


@dataclass
class FSMTConfig(BartConfig):
    """``vocab_size`` is the target's (the logits'); ``source_vocab_size`` the encoder's."""

    source_vocab_size: int = 0

    @classmethod
    def from_hf(cls, hf: Any) -> FSMTConfig:
        return cls(
            **{**vars(BartConfig.from_hf(hf)), "vocab_size": hf.tgt_vocab_size},
            source_vocab_size=hf.src_vocab_size,
        )


class FSMTPositionalEmbedding(PositionsFromRowZero):
    """fairseq's table: ``padding_idx + 1`` rows before the first position."""

    def __init__(self, num_positions: int, dim: int, padding_idx: int | None = None) -> None:
        super().__init__(num_positions + padding_idx + 1, dim)
        self.padding_idx = padding_idx


def fairseq_positions(op, input_ids, padding_idx: int, past_length):
    """``[batch, seq]``: ``cumsum(real) * real + padding_idx + past``, real = not a pad token."""
    pad = op.Constant(value=ir.tensor(padding_idx, dtype=ir.DataType.INT64))
    real = op.Cast(op.Not(op.Equal(input_ids, pad)), to=ir.DataType.INT64)
    counts = op.Mul(op.CumSum(real, op.Constant(value_int=1)), real)
    return op.Add(op.Add(counts, pad), past_length)


class FSMTEncoder(BartEncoder):
    positions_class = FSMTPositionalEmbedding
    embedding_norm = False

    def __init__(self, config: FSMTConfig) -> None:
        super().__init__(config)
        self.embed_tokens = Embedding(config.source_vocab_size, config.hidden_size)

    def position_ids(self, op, input_ids, past_length):
        return fairseq_positions(op, input_ids, self.embed_positions.padding_idx, past_length)


class FSMTDecoder(BartDecoder):
    """BART's post-norm decoder; ``output_projection`` turns its states into the logits."""

    positions_class = FSMTPositionalEmbedding
    embedding_norm = False
    position_ids = FSMTEncoder.position_ids

    def __init__(self, config: FSMTConfig) -> None:
        super().__init__(config)
        d, vocab = config.hidden_size, config.vocab_size
        tied = config.tie_word_embeddings
        self.output_projection = TiedLMHead(self.embed_tokens) if tied else Linear(d, vocab)

    def finish(self, op, x):
        return self.output_projection(op, x)  # [batch, seq, vocab]


class FSMTModel(BartModel):
    encoder_class = FSMTEncoder
    decoder_class = FSMTDecoder


class FSMTForConditionalGeneration(BartForConditionalGeneration):
    """``model`` alone: the logits come from ``model.decoder.output_projection``."""

    config_class = FSMTConfig
    model_class = FSMTModel
    logits_bias = False

    def __init__(self, config: FSMTConfig) -> None:
        super().__init__(config)
        self.lm_head = None

    def decode(self, op, input_ids, encoder_mask, self_cache, cross_cache):
        with module_scope(op, self), module_scope(op, self.model):
            return self.model.decoder(op, input_ids, encoder_mask, self_cache, cross_cache)

    def sanitize(self, weights: dict) -> dict:
        """The position tables where the checkpoint has none; tied, the decoder's embeddings."""
        config = self.config
        if config.tie_word_embeddings:
            embeddings = weights["model.decoder.embed_tokens.weight"]
            weights.setdefault("model.encoder.embed_tokens.weight", embeddings)
            weights.pop("model.decoder.output_projection.weight", None)
        rows = config.max_position_embeddings + config.pad_token_id + 1
        table = tensor2tensor_sinusoids(rows, config.hidden_size, config.pad_token_id)
        return supply_position_tables(weights, table)


MODEL_TYPES = {"fsmt": FSMTForConditionalGeneration}
