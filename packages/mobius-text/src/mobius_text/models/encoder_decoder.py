"""EncoderDecoderModel: a BERT-lineage encoder, and a BERT-lineage or GPT-2 decoder that attends to it.

transformers' composite (``model_type`` ``encoder-decoder``) pairs ``AutoModel(config.encoder)``
(checkpoint keys ``encoder.*``) with ``AutoModelForCausalLM(config.decoder)`` built
with ``is_decoder=True, add_cross_attention=True`` (``decoder.bert.*`` and
``decoder.cls.*``, ``decoder.roberta.*`` and ``decoder.lm_head.*``, or
``decoder.transformer.*`` and ``decoder.lm_head.*``): bert2bert, roberta2roberta,
bert2gpt2 and their mixtures. A BERT decoder layer runs causal self-attention over
its cache, then ``crossattention`` (BERT's attention block over the encoder's
states, post-norm), then the feed-forward; a GPT-2 block adds
``x + crossattention(ln_cross_attn(x))`` between its attention and MLP. When the
two hidden sizes differ the encoder's states pass through ``enc_to_dec_proj``
first. Decoder positions continue from the cache (BERT, GPT-2) or count the
non-pad tokens from ``pad_token_id + 1`` (RoBERTa, as its embeddings do); token
types are all 0. The encoder's pooler is unread. Encoder or decoder families
other than those in :data:`ENCODERS` / :data:`DECODERS` are refused by name.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import (
    LayerNorm,
    Linear,
    causal_bias,
    merge_heads,
    module_scope,
    padding_bias,
    split_heads,
)
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_text.models._bert_common import DecoderCache
from mobius_text.models._gpt_common import Conv1D, make_lm_head
from mobius_text.models.bert import (
    BertAttention,
    BertConfig,
    BertEncoder,
    BertLayer,
    BertModel,
    BertOnlyMLMHead,
)
from mobius_text.models.gpt2 import GPT2Attention, GPT2Block, GPT2Config, GPT2Model
from mobius_text.models.m2m_100 import padding_aware_positions
from mobius_text.models.roberta import RobertaConfig, RobertaLMHead, RobertaModel

ROBERTA_TYPES = ("roberta", "xlm-roberta", "camembert")


def _length(op, x, axis: int):
    """The size of ``x``'s ``axis`` as a scalar int64."""
    return op.Squeeze(op.Shape(x, start=axis, end=axis + 1), [0])


def continued_positions(op, input_ids, past_length):
    """``[1, seq]``: ``past, past + 1...`` (BERT's and GPT-2's decoder positions)."""
    seq = _length(op, input_ids, 1)
    return op.Unsqueeze(op.Range(past_length, op.Add(past_length, seq), 1), [0])


class CrossDecoderCache(DecoderCache):
    """:class:`DecoderCache` that also hands each layer's cross-attention its encoder keys and values."""

    def __init__(self, bias, past_key_values, cross_bias, cross_cache) -> None:
        super().__init__(None, bias, past_key_values)
        self.cross_bias = cross_bias  # [batch, 1, target, source]
        self._cross = iter(cross_cache)

    def cross_attend(self, op, q, num_heads: int, scale: float):
        """``q [batch, target, heads*dim]`` over the next layer's cached encoder keys and values."""
        key, value = next(self._cross)  # [batch, heads, source, dim]
        q = split_heads(op, q, num_heads)
        return merge_heads(op, op.Attention(q, key, value, self.cross_bias, scale=scale))


class BertCrossSelfAttention(nn.Module):
    """``crossattention.self``: queries from the decoder, keys and values from the encoder's states."""

    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.query = Linear(hidden_size, hidden_size, bias=True)
        self.key = Linear(hidden_size, hidden_size, bias=True)
        self.value = Linear(hidden_size, hidden_size, bias=True)
        self.num_heads, self.scale = num_heads, (hidden_size // num_heads) ** -0.5

    def project_kv(self, op, states):
        """The cross-attention cache ``(key, value)`` ``[batch, heads, source, dim]`` of ``states``."""
        return tuple(
            split_heads(op, proj(op, states), self.num_heads) for proj in (self.key, self.value)
        )

    def forward(self, op, x, cache: CrossDecoderCache):
        return cache.cross_attend(op, self.query(op, x), self.num_heads, self.scale)


class BertCrossAttentionLayer(BertLayer):
    """BERT's layer with ``crossattention`` between the self-attention and the feed-forward."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        heads = config.num_attention_heads
        self.crossattention = BertAttention(
            config, BertCrossSelfAttention(config.hidden_size, heads)
        )

    def forward(self, op, x, cache: CrossDecoderCache):
        x = self.attention(op, x, cache)  # causal, through the cache
        x = self.crossattention(op, x, cache)
        return self.output(op, self.intermediate(op, x), x)


class BertCrossAttentionEncoder(BertEncoder):
    layer_class = BertCrossAttentionLayer


class BertDecoderModel(BertModel):
    encoder_class = BertCrossAttentionEncoder


class RobertaDecoderModel(RobertaModel):
    encoder_class = BertCrossAttentionEncoder


class BertDecoder(nn.Module):
    """``BertLMHeadModel`` with cross-attention: ``bert`` and the masked-LM head ``cls``."""

    base_name, head_name = "bert", "cls"

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        base = self.make_base(config)
        setattr(self, self.base_name, base)
        setattr(self, self.head_name, self.make_head(config, base.embeddings.word_embeddings))

    @property
    def base(self):
        return getattr(self, self.base_name)

    def make_base(self, config):
        return BertDecoderModel(config)

    def make_head(self, config, embeddings):
        return BertOnlyMLMHead(config, embeddings)

    def position_ids(self, op, input_ids, past_length):
        return continued_positions(op, input_ids, past_length)

    def cross_chains(self) -> list[tuple[nn.Module, ...]]:
        """Per layer, the modules from here down to the one whose ``project_kv`` makes its cache."""
        base = self.base
        return [
            (base, base.encoder, layer, layer.crossattention, layer.crossattention.self)
            for layer in base.encoder.layer
        ]

    def unread(self) -> list[str]:
        """Checkpoint tensors under this module that no graph reads (buffers, tied copies)."""
        base, head = self.base_name, self.head_name
        unread = [f"{base}.embeddings.position_ids", f"{base}.embeddings.token_type_ids"]
        if self.config.tie_word_embeddings:
            return [
                *unread,
                f"{head}.predictions.decoder.weight",
                f"{head}.predictions.decoder.bias",
            ]
        return [*unread, f"{head}.predictions.bias"]

    def forward(self, op, input_ids, encoder_mask, self_cache, cross_cache):
        base = self.base
        with module_scope(op, base):
            past = self_cache[0][0]  # [batch, heads, past, dim]
            positions = self.position_ids(op, input_ids, _length(op, past, 2))
            x = base.embeddings(op, input_ids, None, positions)  # [batch, target, hidden]
            cache = CrossDecoderCache(
                causal_bias(op, input_ids, past, x.dtype),
                self_cache,
                padding_bias(op, encoder_mask, x.dtype, queries=input_ids),
                cross_cache,
            )
            x = base.encoder(op, x, cache)
        return getattr(self, self.head_name)(op, x), cache.presents


class RobertaDecoder(BertDecoder):
    """``RobertaForCausalLM`` with cross-attention: ``roberta`` and ``lm_head``."""

    base_name, head_name = "roberta", "lm_head"

    def make_base(self, config):
        return RobertaDecoderModel(config)

    def make_head(self, config, embeddings):
        return RobertaLMHead(config, embeddings)

    def position_ids(self, op, input_ids, past_length):
        """Non-pad tokens count on from the cache, after ``pad_token_id``; pads sit at it."""
        return padding_aware_positions(op, input_ids, self.config.pad_token_id, past_length)

    def unread(self) -> list[str]:
        base, head = self.base_name, self.head_name
        unread = [f"{base}.embeddings.position_ids", f"{base}.embeddings.token_type_ids"]
        if self.config.tie_word_embeddings:
            return [*unread, f"{head}.decoder.weight", f"{head}.decoder.bias"]
        return [*unread, f"{head}.bias"]


class GPT2CrossAttention(nn.Module):
    """``crossattention``: ``q_attn`` on the decoder, a fused ``c_attn`` (k | v) on the encoder's states."""

    def __init__(self, config: GPT2Config, scale: float) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.q_attn = Conv1D(hidden, hidden)
        self.c_attn = Conv1D(hidden, 2 * hidden)
        self.c_proj = Conv1D(hidden, hidden)
        self.num_heads, self.scale = config.num_attention_heads, scale

    def project_kv(self, op, states):
        key, value = op.Split(self.c_attn(op, states), num_outputs=2, axis=-1, _outputs=2)
        return split_heads(op, key, self.num_heads), split_heads(op, value, self.num_heads)

    def forward(self, op, x, cross_bias, key, value):
        q = split_heads(op, self.q_attn(op, x), self.num_heads)
        y = op.Attention(q, key, value, cross_bias, scale=self.scale)
        return self.c_proj(op, merge_heads(op, y))


class GPT2CrossBlock(GPT2Block):
    """GPT-2's block with ``x + crossattention(ln_cross_attn(x))`` before the MLP."""

    def __init__(self, config: GPT2Config, attn: GPT2Attention, mlp: nn.Module) -> None:
        super().__init__(attn, mlp, config.hidden_size, config.layer_norm_eps)
        self.ln_cross_attn = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.crossattention = GPT2CrossAttention(config, attn.scale)  # the same scale

    def forward(self, op, x, bias, past, cross):
        h, present = self.attn(op, self.ln_1(op, x), None, bias, *past)
        x = op.Add(x, h)
        x = op.Add(x, self.crossattention(op, self.ln_cross_attn(op, x), *cross))
        return op.Add(x, self.mlp(op, self.ln_2(op, x))), present


class GPT2CrossModel(GPT2Model):
    def __init__(self, config: GPT2Config) -> None:
        super().__init__(config)
        self.h = nn.ModuleList(
            [
                GPT2CrossBlock(config, self.make_attention(config, i), self.make_mlp(config))
                for i in range(config.num_hidden_layers)
            ]
        )


class GPT2Decoder(nn.Module):
    """``GPT2LMHeadModel`` with cross-attention: ``transformer`` and ``lm_head``."""

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.config = config
        self.transformer = GPT2CrossModel(config)
        tied = config.tie_word_embeddings
        self.lm_head = make_lm_head(self.transformer.wte, tied, config.hidden_size)

    def cross_chains(self) -> list[tuple[nn.Module, ...]]:
        return [(self.transformer, block, block.crossattention) for block in self.transformer.h]

    def unread(self) -> list[str]:
        buffers = [
            f"transformer.h.*.{a}.{b}"
            for a in ("attn", "crossattention")
            for b in ("bias", "masked_bias")
        ]
        return [*buffers, "lm_head.weight"] if self.config.tie_word_embeddings else buffers

    def forward(self, op, input_ids, encoder_mask, self_cache, cross_cache):
        model = self.transformer
        with module_scope(op, model):
            past = self_cache[0][0]  # [batch, heads, past, dim]
            positions = continued_positions(op, input_ids, _length(op, past, 2))
            x = model.embed(op, input_ids, positions)  # [batch, target, hidden]
            bias = causal_bias(op, input_ids, past, x.dtype)
            cross_bias = padding_bias(op, encoder_mask, x.dtype, queries=input_ids)
            presents = []
            for block, past_kv, kv in zip(model.h, self_cache, cross_cache, strict=True):
                x, present = block(op, x, bias, past_kv, (cross_bias, *kv))
                presents.append(present)
            x = model.ln_f(op, x)
        return self.lm_head(op, x), presents


#: encoder families: their config class and base model (``AutoModel``'s tree)
ENCODERS = {
    "bert": (BertConfig, BertModel),
    **{name: (RobertaConfig, RobertaModel) for name in ROBERTA_TYPES},
}
#: decoder families: their config class and decoder module (``AutoModelForCausalLM``'s tree)
DECODERS = {
    "bert": (BertConfig, BertDecoder),
    **{name: (RobertaConfig, RobertaDecoder) for name in ROBERTA_TYPES},
    "gpt2": (GPT2Config, GPT2Decoder),
}


@dataclass
class EncoderDecoderConfig:
    model_type: str
    encoder: Any  # the encoder family's config (head "none")
    decoder: Any  # the decoder family's config (head "masked-lm")
    vocab_size: int  # the decoder's
    hidden_size: int  # the encoder's: its states are the encoder graph's output
    decoder_start_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None

    @classmethod
    def from_hf(cls, hf: Any) -> EncoderDecoderConfig:
        enc, dec = hf.encoder, hf.decoder
        if enc.model_type not in ENCODERS:
            raise ConfigError(
                f"encoder-decoder with a {enc.model_type!r} encoder is not built; "
                f"encoders: {sorted(ENCODERS)}"
            )
        if dec.model_type not in DECODERS:
            raise ConfigError(
                f"encoder-decoder with a {dec.model_type!r} decoder is not built; "
                f"decoders: {sorted(DECODERS)}"
            )
        if not (getattr(dec, "is_decoder", False) and getattr(dec, "add_cross_attention", False)):
            raise ConfigError(
                "the decoder of an encoder-decoder needs is_decoder=True and add_cross_attention=True"
            )
        if getattr(dec, "cross_attention_hidden_size", None) not in (None, enc.hidden_size):
            raise ConfigError("cross_attention_hidden_size differs from the encoder's hidden_size")
        encoder = ENCODERS[enc.model_type][0].from_hf(enc)
        decoder_class = DECODERS[dec.model_type][0]
        # RoBERTa's config refuses is_decoder for its encoder-only builds: read it as the encoder's
        decoder = decoder_class.from_hf(_as_encoder(dec))
        if hasattr(decoder, "head"):  # an encoder family's: its masked-LM head is the LM head
            decoder = dataclasses.replace(decoder, head="masked-lm")
        return cls(
            model_type=hf.model_type,
            encoder=encoder,
            decoder=decoder,
            vocab_size=decoder.vocab_size,
            hidden_size=encoder.hidden_size,
            decoder_start_token_id=hf.decoder_start_token_id,
            eos_token_id=getattr(hf, "eos_token_id", None) or getattr(dec, "eos_token_id", None),
            pad_token_id=hf.pad_token_id,
        )


def _as_encoder(hf: Any) -> Any:
    """A copy of a decoder's transformers config with ``is_decoder`` off (for field reading)."""
    hf = copy.copy(hf)
    hf.is_decoder = False
    return hf


class EncoderDecoderModel(Model):
    """``encoder``, optional ``enc_to_dec_proj``, and the ``decoder`` with its LM head."""

    config_class = EncoderDecoderConfig
    task = "seq2seq"

    def __init__(self, config: EncoderDecoderConfig) -> None:
        super().__init__()
        self.config = config
        enc, dec = config.encoder, config.decoder
        self.encoder = ENCODERS[enc.model_type][1](enc)
        self.decoder = DECODERS[dec.model_type][1](dec)
        widths = enc.hidden_size, dec.hidden_size
        self.enc_to_dec_proj = Linear(*widths, bias=True) if widths[0] != widths[1] else None

    @property
    def ignored(self) -> tuple[str, ...]:
        """The encoder's pooler and buffers, the decoder's buffers and tied head copies."""
        unread = ["encoder.pooler.*", "encoder.embeddings.position_ids"]
        unread += ["encoder.embeddings.token_type_ids"]
        return (*unread, *(f"decoder.{name}" for name in self.decoder.unread()))

    def cache_shapes(self) -> tuple[int, int, int]:
        dec = self.config.decoder
        return dec.num_hidden_layers, dec.num_attention_heads, dec.head_dim

    def encode(self, op, input_ids, attention_mask):
        out = self.encoder(op, input_ids, attention_mask, None)
        hidden = out[0] if isinstance(out, tuple) else out  # BERT's model also returns its pooler's
        states = hidden if self.enc_to_dec_proj is None else self.enc_to_dec_proj(op, hidden)
        cross = []
        for chain in self.decoder.cross_chains():  # computed once here, read at every step
            with module_scope(op, self.decoder, *chain):
                cross.append(chain[-1].project_kv(op, states))
        return hidden, cross

    def decode(self, op, input_ids, encoder_mask, self_cache, cross_cache):
        return self.decoder(op, input_ids, encoder_mask, self_cache, cross_cache)


MODEL_TYPES = {"encoder-decoder": EncoderDecoderModel}
