"""SeamlessM4T (v1)'s text-to-unit model (``t2u_model``): an NLLB encoder–decoder from text states to units.

transformers' ``SeamlessM4TTextToUnitForConditionalGeneration`` reads the whole
model's config with every ``t2u_*`` field copied over its unprefixed twin
(``t2u_decoder_layers`` -> ``decoder_layers``, ``t2u_vocab_size`` ->
``vocab_size``, ``t2u_pad_token_id`` -> ``pad_token_id``...); :func:`t2u_config`
does the same, so the text model's config class checks it. The encoder has no
embeddings: it takes the text decoder's last hidden states of the translated
sequence (``inputs_embeds``) and its padding mask, through pre-norm layers and a
final LayerNorm, with no positions. The decoder is the text decoder's kind
(scaled unit embeddings, fairseq sinusoids counted from ``t2u_pad_token_id``);
``lm_head`` is tied to its embeddings unless ``tie_word_embeddings`` is false.

:class:`SeamlessM4TTextToUnitGraphs` gives core's seq2seq task its hooks
(``encode``, ``decode``, ``cache_shapes``) over ``t2u_model`` so that its
parameters keep their checkpoint names (``t2u_model.model.encoder.layers.0...``).
"""

from __future__ import annotations

import copy
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, TiedLMHead, module_scope, padding_bias
from mobius.model import Model
from mobius_audio.models.seamless_m4t import (
    BLOCK_NORM_EPS,
    SeamlessM4TDecoder,
    SeamlessM4TTextDecoding,
)
from mobius_audio.models.seamless_m4t_text import SeamlessM4TEncoderLayer, SeamlessM4TTextConfig

T2U_PREFIX = "t2u_"


def t2u_config(hf: Any, config_class: type = SeamlessM4TTextConfig) -> SeamlessM4TTextConfig:
    """The unit model's config: ``hf`` with every ``t2u_*`` field over its unprefixed twin,
    checked by ``config_class`` (v2's unit model reads more fields)."""
    view = copy.deepcopy(hf)
    for name, value in hf.to_dict().items():
        if name.startswith(T2U_PREFIX):
            setattr(view, name[len(T2U_PREFIX) :], value)
    return config_class.from_hf(view)


class SeamlessM4TTextToUnitEncoder(nn.Module):
    """Pre-norm layers over the given states (no embeddings, no positions), a final LayerNorm."""

    def __init__(self, config: SeamlessM4TTextConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [SeamlessM4TEncoderLayer(config) for _ in range(config.encoder_layers)]
        )
        self.layer_norm = LayerNorm(config.hidden_size, BLOCK_NORM_EPS)

    def forward(self, op, inputs_embeds, attention_mask):
        bias = padding_bias(op, attention_mask, inputs_embeds.dtype)
        x = inputs_embeds
        for layer in self.layers:
            x = layer(op, x, bias)
        return self.layer_norm(op, x)


class SeamlessM4TTextToUnitModel(nn.Module):
    def __init__(self, config: SeamlessM4TTextConfig) -> None:
        super().__init__()
        self.encoder = SeamlessM4TTextToUnitEncoder(config)
        self.decoder = SeamlessM4TDecoder(config)


class SeamlessM4TTextToUnitForConditionalGeneration(nn.Module):
    """``model`` (encoder, decoder) and ``lm_head`` over the unit vocabulary."""

    def __init__(self, config: SeamlessM4TTextConfig) -> None:
        super().__init__()
        self.model = SeamlessM4TTextToUnitModel(config)
        self.lm_head = (
            TiedLMHead(self.model.decoder.embed_tokens)
            if config.tie_word_embeddings
            else Linear(config.hidden_size, config.vocab_size)
        )


class SeamlessM4TTextToUnitGraphs(Model):
    """Core's seq2seq hooks over ``t2u_model``; ``config`` is :func:`t2u_config`'s."""

    task = "seq2seq"
    config_class = SeamlessM4TTextConfig

    def __init__(self, config: SeamlessM4TTextConfig) -> None:
        super().__init__()
        self.config = config
        self.t2u_model = SeamlessM4TTextToUnitForConditionalGeneration(config)

    cache_shapes = SeamlessM4TTextDecoding.cache_shapes  # of the config's (unit) decoder

    def encode(self, op, inputs_embeds, attention_mask):
        """The unit encoder's states and every unit decoder layer's cross-attention ``(key, value)``."""
        t2u = self.t2u_model
        decoder = t2u.model.decoder
        with module_scope(op, self, t2u, t2u.model):
            hidden = t2u.model.encoder(op, inputs_embeds, attention_mask)
            cross = []
            for layer in decoder.layers:  # projected once, read at every unit step
                with module_scope(op, decoder, layer, layer.cross_attention):
                    cross.append(layer.cross_attention.project_kv(op, hidden))
        return hidden, cross

    def decode(self, op, input_ids, encoder_attention_mask, self_cache, cross_cache):
        """The unit logits and the self-attention presents."""
        t2u = self.t2u_model
        with module_scope(op, self, t2u):
            with module_scope(op, t2u.model):
                hidden, presents = t2u.model.decoder(
                    op, input_ids, encoder_attention_mask, self_cache, cross_cache
                )
            return t2u.lm_head(op, hidden), presents
