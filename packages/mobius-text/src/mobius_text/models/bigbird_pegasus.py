"""BigBird-Pegasus with ``attention_type="original_full"``: Pegasus-style pre-norm layers with full attention.

Learned positions from row 0, scaled embeddings, and a final LayerNorm per stack
that the checkpoints name ``layernorm_embedding`` (applied after the last layer,
not to the embeddings). The encoder's attention is BigBird's (``self_attn.self.query``
/ ``key`` / ``value`` and ``self_attn.output``); ``use_bias`` sets every attention
projection's bias. ``block_sparse`` attention is not built (transformers itself
falls back to full attention for sources up to ``(5 + 2 * num_random_blocks) *
block_size`` tokens). The decoder alone (``BigBirdPegasusForCausalLM``) attends in
full whatever ``attention_type`` says: only the encoder has block-sparse attention.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import CrossAttention, Linear, Seq2SeqAttention, bidirectional_attention
from mobius.errors import ConfigError
from mobius_text.models.bart import (
    BartConfig,
    BartDecoder,
    BartEncoder,
    BartForCausalLM,
    BartForConditionalGeneration,
    BartModel,
    PositionsFromRowZero,
    PreNormDecoderLayer,
    PreNormEncoderLayer,
)


@dataclass
class BigBirdPegasusConfig(BartConfig):
    use_bias: bool = False

    @classmethod
    def from_hf(cls, hf: Any) -> BigBirdPegasusConfig:
        if hf.attention_type != "original_full":
            raise ConfigError(
                f"attention_type {hf.attention_type!r} is not built; only 'original_full'"
            )
        return cls(**vars(BartConfig.from_hf(hf)), use_bias=bool(hf.use_bias))


class BigBirdPegasusSelfAttention(nn.Module):
    """``query``/``key``/``value``: full bidirectional attention ``[batch, seq, hidden]``."""

    def __init__(self, config: BigBirdPegasusConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.query = Linear(d, d, bias=config.use_bias)
        self.key = Linear(d, d, bias=config.use_bias)
        self.value = Linear(d, d, bias=config.use_bias)
        self.num_heads, self.scale = config.encoder_heads, (d // config.encoder_heads) ** -0.5

    def forward(self, op, x, bias):
        q, k, v = self.query(op, x), self.key(op, x), self.value(op, x)
        return bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)


class BigBirdPegasusEncoderAttention(nn.Module):
    def __init__(self, config: BigBirdPegasusConfig) -> None:
        super().__init__()
        self.self = BigBirdPegasusSelfAttention(config)
        self.output = Linear(config.hidden_size, config.hidden_size, bias=config.use_bias)

    def forward(self, op, x, bias):
        return self.output(op, self.self(op, x, bias))


class BigBirdPegasusEncoderLayer(PreNormEncoderLayer):
    def __init__(self, config: BigBirdPegasusConfig) -> None:
        super().__init__(config)
        self.self_attn = BigBirdPegasusEncoderAttention(config)


class BigBirdPegasusDecoderLayer(PreNormDecoderLayer):
    def __init__(self, config: BigBirdPegasusConfig) -> None:
        super().__init__(config)
        d, heads, bias = config.hidden_size, config.decoder_heads, config.use_bias
        self.self_attn = Seq2SeqAttention(d, heads, bias=bias)
        self.encoder_attn = CrossAttention(d, heads, bias=bias)


class BigBirdPegasusEncoder(BartEncoder):
    """``layernorm_embedding`` closes the stack; the embeddings are not normalised."""

    layer_class = BigBirdPegasusEncoderLayer
    positions_class = PositionsFromRowZero

    def embed(self, op, input_ids, past_length):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        if self.embed_scale != 1.0:
            x = op.Mul(x, op.CastLike(op.Constant(value_float=self.embed_scale), x))
        return op.Add(x, self.embed_positions(op, self.position_ids(op, input_ids, past_length)))

    def finish(self, op, x):
        return self.layernorm_embedding(op, x)


class BigBirdPegasusDecoder(BartDecoder):
    layer_class = BigBirdPegasusDecoderLayer
    positions_class = PositionsFromRowZero
    embed = BigBirdPegasusEncoder.embed
    finish = BigBirdPegasusEncoder.finish


class BigBirdPegasusModel(BartModel):
    encoder_class = BigBirdPegasusEncoder
    decoder_class = BigBirdPegasusDecoder


class BigBirdPegasusForConditionalGeneration(BartForConditionalGeneration):
    config_class = BigBirdPegasusConfig
    model_class = BigBirdPegasusModel


@dataclass
class BigBirdPegasusDecoderConfig(BigBirdPegasusConfig):
    @classmethod
    def from_hf(cls, hf: Any) -> BigBirdPegasusDecoderConfig:
        return cls(**vars(BartConfig.from_hf(hf)), use_bias=bool(hf.use_bias))


class BigBirdPegasusForCausalLM(BartForCausalLM):
    config_class = BigBirdPegasusDecoderConfig
    seq2seq_class = BigBirdPegasusForConditionalGeneration
    ties_head = False  # transformers' class declares no tied weights: lm_head is its own


MODEL_TYPES = {
    "bigbird_pegasus": BigBirdPegasusForConditionalGeneration,
    "BigBirdPegasusForCausalLM": BigBirdPegasusForCausalLM,
}
