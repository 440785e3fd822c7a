"""mBART: BART with pre-norm layers and a final ``layer_norm`` closing each stack."""

from __future__ import annotations

from mobius_text.models.bart import (
    BartDecoder,
    BartEncoder,
    BartForCausalLM,
    BartForConditionalGeneration,
    BartModel,
    PreNormDecoderLayer,
    PreNormEncoderLayer,
)


class MBartEncoder(BartEncoder):
    layer_class = PreNormEncoderLayer
    final_norm = True


class MBartDecoder(BartDecoder):
    layer_class = PreNormDecoderLayer
    final_norm = True


class MBartModel(BartModel):
    encoder_class = MBartEncoder
    decoder_class = MBartDecoder


class MBartForConditionalGeneration(BartForConditionalGeneration):
    model_class = MBartModel


class MBartForCausalLM(BartForCausalLM):
    seq2seq_class = MBartForConditionalGeneration


MODEL_TYPES = {"mbart": MBartForConditionalGeneration, "MBartForCausalLM": MBartForCausalLM}
