"""SeamlessM4T (v1, v2) text-to-text: the NLLB text encoder before the speech-to-text model's decoder.

``SeamlessM4TForTextToText`` and ``SeamlessM4Tv2ForTextToText`` are one
architecture (v2 changed the speech encoder and the unit model, not the text
parts). They share ``model_type`` with the speech-to-text model
(:mod:`mobius_audio.models.seamless_m4t`), so they are registered under their
class names: a checkpoint saved from the text-to-text class builds as it by its
``architectures``, and the hub's all-in-one ``SeamlessM4T(v2)Model`` checkpoints
(``facebook/hf-seamless-m4t-medium``, ``facebook/seamless-m4t-v2-large``) with
``mobius build CHECKPOINT OUT --model-type SeamlessM4TForTextToText``. Their speech
encoder, text-to-unit model and vocoder are left out, named in one build note.

The text encoder (``text_encoder``) is M2M-100/NLLB's under SeamlessM4T's names:
embeddings scaled by ``sqrt(hidden)`` (``scale_embedding``; the table is
``shared``), fairseq sinusoids at padding-aware positions computed in the graph,
pre-norm layers (``self_attn``, ``ffn``) and a final LayerNorm. Graphs follow
core's :class:`mobius.tasks._seq2seq.Seq2SeqTask`: the tokenizer's
``__eng__ ... </s>`` source in, the decoder prompted with ``</s>`` then the target
language's token (:mod:`mobius_audio.seamless_generate`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Seq2SeqAttention, padding_bias
from mobius.errors import ConfigError
from mobius_audio.models.seamless_m4t import (
    BLOCK_NORM_EPS,
    SeamlessM4TDecoderConfig,
    SeamlessM4TFeedForwardNetwork,
    SeamlessM4TTextDecoding,
    config_int,
)
from mobius_audio.models.speech_to_text import padding_aware_positions, sinusoids

logger = logging.getLogger("mobius")

SEAMLESS_TYPES = ("seamless_m4t", "seamless_m4t_v2")
#: What a whole SeamlessM4T(v2)Model checkpoint holds besides text-to-text's tensors.
SPEECH_PARTS = ("speech_encoder", "t2u_model", "vocoder")


@dataclass
class SeamlessM4TTextConfig(SeamlessM4TDecoderConfig):
    """The decoder's fields and the text encoder's."""

    encoder_layers: int
    encoder_heads: int
    encoder_ffn_dim: int

    @classmethod
    def hf_fields(cls, hf: Any) -> dict[str, Any]:
        if getattr(hf, "model_type", None) not in SEAMLESS_TYPES:
            raise ConfigError(
                f"SeamlessM4T text-to-text builds a config of model_type "
                f"{' or '.join(SEAMLESS_TYPES)}, not {getattr(hf, 'model_type', None)!r}"
            )
        fields = super().hf_fields(hf)
        heads = config_int(hf, "encoder_attention_heads", 1)
        if fields["hidden_size"] % heads:
            raise ConfigError(
                f"{hf.model_type}: hidden_size={fields['hidden_size']} must split into "
                "encoder_attention_heads"
            )
        return dict(
            fields,
            encoder_layers=config_int(hf, "encoder_layers", 1),
            encoder_heads=heads,
            encoder_ffn_dim=config_int(hf, "encoder_ffn_dim", 1),
        )


class SeamlessM4TEncoderLayer(nn.Module):
    """Pre-norm: self-attention over the source, then the feed-forward."""

    def __init__(self, config: SeamlessM4TTextConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.self_attn = Seq2SeqAttention(d, config.encoder_heads)
        self.self_attn_layer_norm = LayerNorm(d, BLOCK_NORM_EPS)
        self.ffn = SeamlessM4TFeedForwardNetwork(config, config.encoder_ffn_dim)
        self.ffn_layer_norm = LayerNorm(d, BLOCK_NORM_EPS)

    def forward(self, op, x, bias):
        x = op.Add(x, self.self_attn(op, self.self_attn_layer_norm(op, x), bias))
        return op.Add(x, self.ffn(op, self.ffn_layer_norm(op, x)))


class SeamlessM4TTextEncoder(nn.Module):
    """Scaled embeddings plus padding-aware sinusoids, the layers, a final LayerNorm."""

    def __init__(self, config: SeamlessM4TTextConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [SeamlessM4TEncoderLayer(config) for _ in range(config.encoder_layers)]
        )
        self.layer_norm = LayerNorm(config.hidden_size, BLOCK_NORM_EPS)

    def forward(self, op, input_ids, attention_mask):
        config = self.config
        x = self.embed_tokens(op, input_ids)
        if config.scale_embedding:
            x = op.Mul(x, math.sqrt(config.hidden_size))
        # pad tokens sit at position pad_token_id, whose sinusoid row is zero
        positions = padding_aware_positions(
            op, input_ids, config.pad_token_id, op.Constant(value_int=0)
        )
        x = op.Add(
            x, op.CastLike(sinusoids(op, positions, config.hidden_size, config.pad_token_id), x)
        )
        bias = padding_bias(op, attention_mask, x.dtype)  # [batch, 1, source, source]
        for layer in self.layers:
            x = layer(op, x, bias)
        return self.layer_norm(op, x)


class SeamlessM4TForTextToText(SeamlessM4TTextDecoding):
    """``text_encoder``, then :class:`~mobius_audio.models.seamless_m4t.SeamlessM4TTextDecoding`."""

    config_class = SeamlessM4TTextConfig
    task = "seq2seq"
    ignored = tuple(f"{part}.*" for part in SPEECH_PARTS)
    embedding_tables = (
        "text_encoder.embed_tokens.weight",
        *SeamlessM4TTextDecoding.embedding_tables,
    )

    def __init__(self, config: SeamlessM4TTextConfig) -> None:
        super().__init__(config)
        self.text_encoder = SeamlessM4TTextEncoder(config)

    def encode(self, op, input_ids, attention_mask):
        """The encoder's states and every decoder layer's cross-attention ``(key, value)``."""
        hidden = self.text_encoder(op, input_ids, attention_mask)
        return hidden, self.cross_caches(op, hidden)

    def sanitize(self, weights: dict) -> dict:
        """The base's table tying; a whole model's speech parts are named in a note, then left out."""
        left_out = {part: 0 for part in SPEECH_PARTS}
        for name in weights:
            part = name.split(".", 1)[0]
            if part in left_out:
                left_out[part] += 1
        if any(left_out.values()):
            logger.warning(
                "SeamlessM4T text-to-text: the checkpoint's speech parts are not built, "
                "their tensors left out: %s",
                ", ".join(f"{part} ({n})" for part, n in left_out.items() if n),
            )
        return super().sanitize(weights)


MODEL_TYPES = {
    "SeamlessM4TForTextToText": SeamlessM4TForTextToText,
    "SeamlessM4Tv2ForTextToText": SeamlessM4TForTextToText,  # the same text parts
}
