"""Blenderbot (pre-norm, final norms) and Blenderbot-small (post-norm, embedding norm): learned positions from row 0."""

from __future__ import annotations

from mobius_text.models.bart import (
    BartDecoder,
    BartEncoder,
    BartForCausalLM,
    BartForConditionalGeneration,
    BartModel,
    PositionsFromRowZero,
)
from mobius_text.models.mbart import MBartDecoder, MBartEncoder


class BlenderbotEncoder(MBartEncoder):
    """mBART's pre-norm stack and final norm; positions from row 0, no embedding norm."""

    positions_class = PositionsFromRowZero
    embedding_norm = False


class BlenderbotDecoder(MBartDecoder):
    positions_class = PositionsFromRowZero
    embedding_norm = False


class BlenderbotModel(BartModel):
    encoder_class = BlenderbotEncoder
    decoder_class = BlenderbotDecoder


class BlenderbotForConditionalGeneration(BartForConditionalGeneration):
    model_class = BlenderbotModel


class BlenderbotSmallEncoder(BartEncoder):
    positions_class = PositionsFromRowZero


class BlenderbotSmallDecoder(BartDecoder):
    positions_class = PositionsFromRowZero

    def embed(self, op, input_ids, past_length):
        """The decoder normalises the token embeddings before adding the positions."""
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        if self.embed_scale != 1.0:
            x = op.Mul(x, op.CastLike(op.Constant(value_float=self.embed_scale), x))
        x = self.layernorm_embedding(op, x)
        return op.Add(x, self.embed_positions(op, self.position_ids(op, input_ids, past_length)))


class BlenderbotSmallModel(BartModel):
    encoder_class = BlenderbotSmallEncoder
    decoder_class = BlenderbotSmallDecoder


class BlenderbotSmallForConditionalGeneration(BartForConditionalGeneration):
    model_class = BlenderbotSmallModel


class BlenderbotForCausalLM(BartForCausalLM):
    seq2seq_class = BlenderbotForConditionalGeneration


class BlenderbotSmallForCausalLM(BartForCausalLM):
    seq2seq_class = BlenderbotSmallForConditionalGeneration


MODEL_TYPES = {
    "blenderbot": BlenderbotForConditionalGeneration,
    "blenderbot-small": BlenderbotSmallForConditionalGeneration,
    "BlenderbotForCausalLM": BlenderbotForCausalLM,
    "BlenderbotSmallForCausalLM": BlenderbotSmallForCausalLM,
}
