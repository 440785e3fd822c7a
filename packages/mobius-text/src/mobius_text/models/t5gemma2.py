"""T5Gemma 2: two Gemma 3 stacks; each decoder layer attends to its past and the source in one softmax.

The text-to-text model (``input_ids`` to the encoder): the encoder's SigLIP
``vision_tower`` and ``multi_modal_projector`` only fill image-token positions
from ``pixel_values``, which the seq2seq contract has no input for, so they are
left unread (:attr:`T5Gemma2ForConditionalGeneration.ignored`); image tokens are
embedded as any other token, as transformers does without pixels.

Both stacks are Gemma 3's (``encoder``, ``decoder``; checkpoints keep the encoder's
text model there, transformers' module tree under ``encoder.text_model``): embeddings scaled by
``sqrt(hidden)`` except the ``eoi_token_index`` token, which reads ``eoi_embedding``
unscaled; sandwich RMS norms ``x * (1 + w)``; per-head ``q_norm``/``k_norm``; a local
rotary table for sliding layers and a global one for full layers; scores scaled
by ``query_pre_attn_scalar ** -0.5``, never soft-capped. The encoder's sliding
window is bidirectional: query ``i`` sees key ``j`` when
``-(window // 2) <= i - j < (window + 1) // 2``. A decoder layer's ``self_attn``
projects the encoder's states with its own ``k_proj`` (then ``k_norm``, no
rotary) and ``v_proj``: the encoder graph makes these once, and every step
attends over ``[past and new keys ; source keys]`` with one softmax, the self part
causal (and windowed in sliding layers), the source part masked at its pads. The
head ``lm_head.out_proj`` is tied to the embeddings (the decoder's are the
encoder's); the logits are soft-capped by the decoder's ``final_logit_softcapping``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Linear,
    apply_rotary,
    lowest_value,
    make_rotary_embedding,
    merge_heads,
    module_scope,
    padding_bias,
    split_heads,
)
from mobius.errors import ConfigError
from mobius_text.models.gemma import GemmaRMSNorm, ScaledEmbedding
from mobius_text.models.gemma3 import Gemma3TextConfig
from mobius_text.models.t5gemma import (
    T5GemmaEncoderLayer,
    T5GemmaForConditionalGeneration,
    decoder_bias,
)

LAYER_TYPES = ("full_attention", "sliding_attention")


@dataclass
class T5Gemma2Config:
    model_type: str
    vocab_size: int
    hidden_size: int  # the encoder's: its states are the encoder graph's output
    encoder: Gemma3TextConfig
    decoder: Gemma3TextConfig
    eoi_token_index: int | None = None
    tie_word_embeddings: bool = True
    decoder_start_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None

    @classmethod
    def from_hf(cls, hf: Any) -> T5Gemma2Config:
        encoder = Gemma3TextConfig.from_hf(hf.encoder.text_config)
        decoder = Gemma3TextConfig.from_hf(hf.decoder)
        for stack in (encoder, decoder):
            unknown = set(stack.layer_types) - set(LAYER_TYPES)
            if unknown:
                raise ConfigError(f"t5gemma2 layer types {sorted(unknown)} are not built")
        start = getattr(hf, "decoder_start_token_id", None)
        return cls(
            model_type=hf.model_type,
            vocab_size=decoder.vocab_size,
            hidden_size=encoder.hidden_size,
            encoder=encoder,
            decoder=decoder,
            eoi_token_index=hf.eoi_token_index,
            tie_word_embeddings=bool(hf.tie_word_embeddings),
            decoder_start_token_id=hf.decoder.bos_token_id if start is None else start,
            eos_token_id=hf.eos_token_id,
            pad_token_id=hf.pad_token_id,
        )


class T5Gemma2Embedding(ScaledEmbedding):
    """Gemma's scaled lookup; the end-of-image token reads ``eoi_embedding``, unscaled."""

    def __init__(self, vocab_size: int, hidden_size: int, eoi_token_index: int | None) -> None:
        super().__init__(vocab_size, hidden_size)
        self.eoi_embedding = nn.Parameter([hidden_size])
        self.eoi_token_index = eoi_token_index

    def forward(self, op, ids):
        x = super().forward(op, ids)  # [batch, seq, hidden]
        if self.eoi_token_index is None:
            return x
        eoi = op.Constant(value=ir.tensor(self.eoi_token_index, dtype=ir.DataType.INT64))
        return op.Where(op.Unsqueeze(op.Equal(ids, eoi), [-1]), self.eoi_embedding, x)


class T5Gemma2Attention(nn.Module):
    """Grouped-head attention with per-head query/key norms and rotary; the base of both stacks'."""

    def __init__(self, config: Gemma3TextConfig) -> None:
        super().__init__()
        hidden, dim, bias = config.hidden_size, config.head_dim, config.attention_bias
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.q_proj = Linear(hidden, self.num_heads * dim, bias)
        self.k_proj = Linear(hidden, self.num_kv_heads * dim, bias)
        self.v_proj = Linear(hidden, self.num_kv_heads * dim, bias)
        self.o_proj = Linear(self.num_heads * dim, hidden, bias)
        self.q_norm = GemmaRMSNorm(dim, config.rms_norm_eps)
        self.k_norm = GemmaRMSNorm(dim, config.rms_norm_eps)
        self.head_dim, self.scale = dim, config.query_pre_attn_scalar**-0.5

    def heads(self, op, x, proj, norm=None):
        """``[batch, heads, seq, dim]`` of ``proj(x)``, normalised per head when ``norm`` is given."""
        y = split_heads(op, proj(op, x), head_dim=self.head_dim)
        return norm(op, y) if norm is not None else y

    def rotated_qkv(self, op, x, rope):
        cos, sin = rope
        q = apply_rotary(op, self.heads(op, x, self.q_proj, self.q_norm), cos, sin, self.head_dim)
        k = apply_rotary(op, self.heads(op, x, self.k_proj, self.k_norm), cos, sin, self.head_dim)
        return q, k, self.heads(op, x, self.v_proj)

    def attend(self, op, q, k, v, bias):
        y = op.Attention(q, k, v, bias, scale=self.scale)  # [batch, heads, seq, dim]
        return self.o_proj(op, merge_heads(op, y))

    def forward(self, op, x, rope, bias):
        """The encoder's bidirectional self-attention."""
        return self.attend(op, *self.rotated_qkv(op, x, rope), bias)


class T5Gemma2MergedAttention(T5Gemma2Attention):
    """The decoder's ``self_attn``: one softmax over its cached keys and the source's."""

    def project_source(self, op, states):
        """The source's ``(key, value)`` ``[batch, kv_heads, source, dim]``: ``k_norm``, no rotary."""
        return self.heads(op, states, self.k_proj, self.k_norm), self.heads(op, states, self.v_proj)

    def forward(self, op, x, rope, bias, past_key, past_value, cross_bias, key, value):
        q, k, v = self.rotated_qkv(op, x, rope)
        k, v = op.Concat(past_key, k, axis=2), op.Concat(past_value, v, axis=2)
        y = self.attend(
            op,
            q,
            op.Concat(k, key, axis=2),  # [batch, kv_heads, past + target + source, dim]
            op.Concat(v, value, axis=2),
            op.Concat(bias, cross_bias, axis=-1),
        )
        return y, (k, v)


class T5Gemma2EncoderLayer(T5GemmaEncoderLayer):
    """T5Gemma's sandwich layer with Gemma 3's attention."""

    def make_self_attention(self, config: Gemma3TextConfig) -> nn.Module:
        return T5Gemma2Attention(config)


class T5Gemma2DecoderLayer(T5GemmaEncoderLayer):
    def make_self_attention(self, config: Gemma3TextConfig) -> nn.Module:
        return T5Gemma2MergedAttention(config)

    def forward(self, op, x, rope, bias, past, cross):
        pre, post = self.pre_self_attn_layernorm, self.post_self_attn_layernorm
        x, present = self.sandwich(op, x, pre, self.self_attn, post, rope, bias, *past, *cross)
        return self.feed_forward(op, x), present


class Gemma3Stack(nn.Module):
    """Embeddings, layers, final norm and the two rotary tables of a Gemma 3 stack."""

    layer_class: type[nn.Module] = T5Gemma2EncoderLayer

    def __init__(self, config: Gemma3TextConfig, eoi_token_index: int | None) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.embed_tokens = T5Gemma2Embedding(config.vocab_size, hidden, eoi_token_index)
        self.layers = nn.ModuleList(
            [self.layer_class(config) for _ in range(config.num_hidden_layers)]
        )
        self.norm = GemmaRMSNorm(hidden, config.rms_norm_eps)
        positions = config.max_position_embeddings
        self.rotary_emb = make_rotary_embedding(config.rope, config.head_dim, positions)
        self.local_rotary_emb = make_rotary_embedding(config.local_rope, config.head_dim, positions)
        self.config = config

    def ropes(self, op, positions):
        """``{layer type: (cos, sin)}`` at ``positions [batch, seq]``."""
        tables = {"full_attention": self.rotary_emb, "sliding_attention": self.local_rotary_emb}
        kinds = dict.fromkeys(self.config.layer_types)  # in order: reproducible graphs
        return {kind: tables[kind](op, positions) for kind in kinds}


def bidirectional_window(op, bias, seq, window: int, dtype: ir.DataType):
    """``bias [batch, 1, seq, seq]`` masked outside ``-(window // 2) <= i - j < (window + 1) // 2``."""
    index = op.Range(0, seq, 1)
    dist = op.Sub(op.Unsqueeze(index, [1]), op.Unsqueeze(index, [0]))  # [seq, seq]: i - j
    near = op.And(
        op.GreaterOrEqual(dist, op.Constant(value_int=-(window // 2))),
        op.Less(dist, op.Constant(value_int=(window + 1) // 2)),
    )
    far = op.Constant(value=ir.tensor(np.array(lowest_value(dtype), dtype=dtype.numpy())))
    return op.Where(op.Unsqueeze(near, [0, 1]), bias, far)


class T5Gemma2TextEncoder(Gemma3Stack):
    def forward(self, op, input_ids, attention_mask):
        x = self.embed_tokens(op, input_ids)
        seq = op.Squeeze(op.Shape(input_ids, start=1, end=2), [0])
        positions = op.Expand(op.Unsqueeze(op.Range(0, seq, 1), [0]), op.Shape(input_ids))
        ropes = self.ropes(op, positions)
        full = padding_bias(op, attention_mask, x.dtype)  # [batch, 1, seq, seq]
        biases = {"full_attention": full, "sliding_attention": full}
        if self.config.sliding_window is not None:
            window = self.config.sliding_window
            biases["sliding_attention"] = bidirectional_window(op, full, seq, window, x.dtype)
        for layer, kind in zip(self.layers, self.config.layer_types, strict=True):
            x = layer(op, x, ropes[kind], biases[kind])
        return self.norm(op, x)


class T5Gemma2Decoder(Gemma3Stack):
    layer_class = T5Gemma2DecoderLayer

    def forward(self, op, input_ids, encoder_mask, self_cache, cross_cache):
        x = self.embed_tokens(op, input_ids)
        past = op.Squeeze(op.Shape(self_cache[0][0], start=2, end=3), [0])
        total = op.Add(past, op.Squeeze(op.Shape(input_ids, start=1, end=2), [0]))
        positions = op.Expand(op.Unsqueeze(op.Range(past, total, 1), [0]), op.Shape(input_ids))
        ropes = self.ropes(op, positions)
        windows = {"full_attention": None, "sliding_attention": self.config.sliding_window}
        biases = {
            kind: decoder_bias(op, input_ids, self_cache[0][0], x.dtype, windows[kind])
            for kind in ropes
        }
        cross_bias = padding_bias(op, encoder_mask, x.dtype, queries=input_ids)
        presents = []
        for i, (layer, kind) in enumerate(zip(self.layers, self.config.layer_types, strict=True)):
            cross = (cross_bias, *cross_cache[i])
            x, present = layer(op, x, ropes[kind], biases[kind], self_cache[i], cross)
            presents.append(present)
        return self.norm(op, x), presents


class T5Gemma2Model(nn.Module):
    def __init__(self, config: T5Gemma2Config) -> None:
        super().__init__()
        self.encoder = T5Gemma2TextEncoder(config.encoder, config.eoi_token_index)
        self.decoder = T5Gemma2Decoder(config.decoder, config.eoi_token_index)


class T5Gemma2ForConditionalGeneration(T5GemmaForConditionalGeneration):
    """The text-to-text T5Gemma 2; see the module docstring."""

    config_class = T5Gemma2Config
    model_class = T5Gemma2Model
    ignored = ("model.encoder.vision_tower.*", "model.encoder.multi_modal_projector.*")

    def encode(self, op, input_ids, attention_mask):
        with module_scope(op, self.model):  # the stacks are called outside model's forward
            hidden = self.model.encoder(op, input_ids, attention_mask)
        cross, decoder = [], self.model.decoder
        for layer in decoder.layers:  # computed once here, read at every decoder step
            with module_scope(op, self.model, decoder, layer, layer.self_attn):
                cross.append(layer.self_attn.project_source(op, hidden))
        return hidden, cross

    def sanitize(self, weights: dict) -> dict:
        """transformers' module tree (``encoder.text_model``) renamed to the checkpoints' layout; the
        decoder's embeddings are the encoder's unless stored; a tied head reads them too."""
        inner = "model.encoder.text_model."
        weights = {
            k.replace(inner, "model.encoder.", 1) if k.startswith(inner) else k: v
            for k, v in weights.items()
        }
        source = "model.encoder.embed_tokens."
        for name in ("weight", "eoi_embedding"):
            if source + name in weights:
                weights.setdefault("model.decoder.embed_tokens." + name, weights[source + name])
        if self.config.tie_word_embeddings:
            weights.pop("lm_head.out_proj.weight", None)
        return weights


MODEL_TYPES = {"t5gemma2": T5Gemma2ForConditionalGeneration}
