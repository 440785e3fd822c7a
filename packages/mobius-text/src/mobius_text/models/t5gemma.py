"""T5Gemma: an encoder–decoder of two Gemma 2 stacks, the decoder's layers with cross-attention.

Each stack has its own Gemma 2 config (``encoder``, ``decoder``): embeddings
scaled by ``sqrt(hidden)``, offset RMS norms before and after every block
(self-attention, cross-attention, MLP), GeGLU MLPs, rotary positions, scores
scaled by ``query_pre_attn_scalar ** -0.5`` and soft-capped before the mask, and
alternating sliding-window / full layers. The encoder's window is
bidirectional (``|i - j| <= sliding_window``), the decoder's causal
(``i - j < sliding_window``); the decoder keeps every past token in its cache
and masks the window (transformers' sliding cache keeps just the window: the
same attention). Cross-attention has no rotary and no window; its keys and
values come from the encoder's states (``cross_attention_hidden_size``), made
once by the encoder graph. The head ``lm_head.out_proj`` is tied to the
decoder's embeddings unless the config says otherwise; the logits are
soft-capped by the decoder's ``final_logit_softcapping``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    CrossAttention,
    GatedMLP,
    Linear,
    TiedLMHead,
    lowest_value,
    make_rotary_embedding,
    module_scope,
    padding_bias,
    softcap,
)
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_text.models._encoder_rotary import (
    EncoderRotary,
    rotate_heads,
    sequence_positions,
    window_bias,
)
from mobius_text.models.gemma import GemmaRMSNorm, ScaledEmbedding
from mobius_text.models.gemma2 import Gemma2Config, SoftcapAttention


@dataclass
class T5GemmaConfig:
    model_type: str
    vocab_size: int
    hidden_size: int  # the encoder's: its states are the encoder graph's output
    encoder: Gemma2Config
    decoder: Gemma2Config
    tie_word_embeddings: bool = True
    decoder_start_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None

    @classmethod
    def from_hf(cls, hf: Any) -> T5GemmaConfig:
        encoder, decoder = Gemma2Config.from_hf(hf.encoder), Gemma2Config.from_hf(hf.decoder)
        for stack in (encoder, decoder):
            unknown = set(stack.layer_types) - {"full_attention", "sliding_attention"}
            if unknown:
                raise ConfigError(f"t5gemma layer types {sorted(unknown)} are not built")
        return cls(
            model_type=hf.model_type,
            vocab_size=decoder.vocab_size,
            hidden_size=encoder.hidden_size,
            encoder=encoder,
            decoder=decoder,
            tie_word_embeddings=bool(hf.tie_word_embeddings),
            decoder_start_token_id=getattr(hf, "decoder_start_token_id", None),
            eos_token_id=hf.eos_token_id,
            pad_token_id=hf.pad_token_id,
        )


def _softcap_attribute(config: Gemma2Config) -> dict:
    cap = config.attn_logit_softcapping
    return {"softcap": float(cap)} if cap else {}


class T5GemmaEncoderAttention(nn.Module):
    """Bidirectional self-attention on ``[batch, seq, heads*dim]`` (the op splits the heads)."""

    def __init__(self, config: Gemma2Config) -> None:
        super().__init__()
        hidden, dim, bias = config.hidden_size, config.head_dim, config.attention_bias
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.q_proj = Linear(hidden, self.num_heads * dim, bias)
        self.k_proj = Linear(hidden, self.num_kv_heads * dim, bias)
        self.v_proj = Linear(hidden, self.num_kv_heads * dim, bias)
        self.o_proj = Linear(self.num_heads * dim, hidden, bias)
        self.scale = config.query_pre_attn_scalar**-0.5
        self.extra = _softcap_attribute(config)

    def forward(self, op, x, rotary, bias):
        q = rotate_heads(op, self.q_proj(op, x), rotary, self.num_heads)
        k = rotate_heads(op, self.k_proj(op, x), rotary, self.num_kv_heads)
        y = op.Attention(
            q, k, self.v_proj(op, x), bias, q_num_heads=self.num_heads,
            kv_num_heads=self.num_kv_heads, scale=self.scale, **self.extra,
        )  # fmt: skip
        return self.o_proj(op, y)


class T5GemmaCrossAttention(CrossAttention):
    """``cross_attn``: grouped heads over the encoder's states, soft-capped like self-attention."""

    projection_names = ("q_proj", "k_proj", "v_proj", "o_proj")


class T5GemmaEncoderLayer(nn.Module):
    def __init__(self, config: Gemma2Config) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = self.make_self_attention(config)
        self.pre_self_attn_layernorm = GemmaRMSNorm(hidden, eps)
        self.post_self_attn_layernorm = GemmaRMSNorm(hidden, eps)
        self.mlp = GatedMLP(hidden, config.intermediate_size, config.hidden_act)
        self.pre_feedforward_layernorm = GemmaRMSNorm(hidden, eps)
        self.post_feedforward_layernorm = GemmaRMSNorm(hidden, eps)

    def make_self_attention(self, config: Gemma2Config) -> nn.Module:
        return T5GemmaEncoderAttention(config)

    def sandwich(self, op, x, pre, block, post, *args):
        """``x + post(block(pre(x), *args))``; the block may also return a cache."""
        out = block(op, pre(op, x), *args)
        y, present = out if isinstance(out, tuple) else (out, None)
        return op.Add(x, post(op, y)), present

    def feed_forward(self, op, x):
        pre, post = self.pre_feedforward_layernorm, self.post_feedforward_layernorm
        return self.sandwich(op, x, pre, self.mlp, post)[0]

    def forward(self, op, x, rotary, bias):
        pre, post = self.pre_self_attn_layernorm, self.post_self_attn_layernorm
        x, _ = self.sandwich(op, x, pre, self.self_attn, post, rotary, bias)
        return self.feed_forward(op, x)


class T5GemmaDecoderLayer(T5GemmaEncoderLayer):
    def __init__(self, config: Gemma2Config, source_hidden: int) -> None:
        super().__init__(config)
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.cross_attn = T5GemmaCrossAttention(
            hidden, config.num_attention_heads, config.head_dim,
            num_kv_heads=config.num_key_value_heads, source_size=source_hidden,
            bias=config.attention_bias, scale=config.query_pre_attn_scalar**-0.5,
            softcap=config.attn_logit_softcapping,
        )  # fmt: skip
        self.pre_cross_attn_layernorm = GemmaRMSNorm(hidden, eps)
        self.post_cross_attn_layernorm = GemmaRMSNorm(hidden, eps)

    def make_self_attention(self, config: Gemma2Config) -> nn.Module:
        return SoftcapAttention(
            config.hidden_size, config.num_attention_heads, config.num_key_value_heads,
            config.head_dim, bias=config.attention_bias, out_bias=config.attention_bias,
            scale=config.query_pre_attn_scalar**-0.5, softcap=config.attn_logit_softcapping,
        )  # fmt: skip

    def forward(self, op, x, rope, bias, past, cross):
        pre, post = self.pre_self_attn_layernorm, self.post_self_attn_layernorm
        x, present = self.sandwich(op, x, pre, self.self_attn, post, rope, bias, *past)
        pre, post = self.pre_cross_attn_layernorm, self.post_cross_attn_layernorm
        x, _ = self.sandwich(op, x, pre, self.cross_attn, post, *cross)
        return self.feed_forward(op, x), present


class T5GemmaEncoder(nn.Module):
    def __init__(self, config: Gemma2Config) -> None:
        super().__init__()
        self.embed_tokens = ScaledEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [T5GemmaEncoderLayer(config) for _ in range(config.num_hidden_layers)]
        )
        self.norm = GemmaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = EncoderRotary(config.rope, config.head_dim, config.max_position_embeddings)
        self.config = config

    def forward(self, op, input_ids, attention_mask):
        x = self.embed_tokens(op, input_ids)
        positions = sequence_positions(op, input_ids)
        rotary = self.rotary(op, positions)
        full = padding_bias(op, attention_mask, x.dtype)  # [batch, 1, seq, seq]
        window, sliding = self.config.sliding_window, full
        if window is not None:  # |i - j| <= window
            first_row = op.Slice(positions, [0], [1], [0])
            sliding = window_bias(op, full, first_row, window, x.dtype)
        biases = {"full_attention": full, "sliding_attention": sliding}
        for layer, kind in zip(self.layers, self.config.layer_types, strict=True):
            x = layer(op, x, rotary, biases[kind])
        return self.norm(op, x)


def decoder_bias(op, input_ids, past_key, dtype: ir.DataType, window: int | None):
    """``[batch, 1, target, past + target]``: causal, and within ``window`` tokens when given."""
    past = op.Squeeze(op.Shape(past_key, start=2, end=3), [0])
    total = op.Add(past, op.Squeeze(op.Shape(input_ids, start=1, end=2), [0]))
    keys, queries = op.Range(0, total, 1), op.Unsqueeze(op.Range(past, total, 1), [1])
    visible = op.LessOrEqual(keys, queries)
    if window is not None:
        visible = op.And(visible, op.Less(op.Sub(queries, keys), window))
    zero = op.Constant(value=ir.tensor(np.array(0, dtype=dtype.numpy())))
    lowest = op.Constant(value=ir.tensor(np.array(lowest_value(dtype), dtype=dtype.numpy())))
    mask = op.Unsqueeze(op.Where(visible, zero, lowest), [0, 1])
    # The batch spelled out: GroupQueryAttention's slot counts take it from the mask.
    batch = op.Shape(input_ids, start=0, end=1)
    return op.Expand(mask, op.Concat(batch, op.Constant(value_ints=[1, 1, 1]), axis=0))


class T5GemmaDecoder(nn.Module):
    def __init__(self, config: Gemma2Config, source_hidden: int) -> None:
        super().__init__()
        self.embed_tokens = ScaledEmbedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [T5GemmaDecoderLayer(config, source_hidden) for _ in range(config.num_hidden_layers)]
        )
        self.norm = GemmaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.head_dim, config.max_position_embeddings
        )
        self.config = config

    def forward(self, op, input_ids, encoder_mask, self_cache, cross_cache):
        x = self.embed_tokens(op, input_ids)
        past = op.Squeeze(op.Shape(self_cache[0][0], start=2, end=3), [0])
        total = op.Add(past, op.Squeeze(op.Shape(input_ids, start=1, end=2), [0]))
        positions = op.Expand(op.Unsqueeze(op.Range(past, total, 1), [0]), op.Shape(input_ids))
        rope = self.rotary_emb(op, positions)
        windows = {"full_attention": None, "sliding_attention": self.config.sliding_window}
        biases = {
            kind: decoder_bias(op, input_ids, self_cache[0][0], x.dtype, windows[kind])
            for kind in dict.fromkeys(self.config.layer_types)  # in order: reproducible graphs
        }
        cross_bias = padding_bias(op, encoder_mask, x.dtype, queries=input_ids)
        presents = []
        for i, (layer, kind) in enumerate(zip(self.layers, self.config.layer_types, strict=True)):
            cross = (cross_bias, *cross_cache[i])
            x, present = layer(op, x, rope, biases[kind], self_cache[i], cross)
            presents.append(present)
        return self.norm(op, x), presents


class T5GemmaModel(nn.Module):
    def __init__(self, config: T5GemmaConfig) -> None:
        super().__init__()
        self.encoder = T5GemmaEncoder(config.encoder)
        self.decoder = T5GemmaDecoder(config.decoder, config.encoder.hidden_size)


class T5GemmaLMHead(nn.Module):
    def __init__(self, hidden_size: int, vocab_size: int) -> None:
        super().__init__()
        self.out_proj = Linear(hidden_size, vocab_size)

    def forward(self, op, x):
        return self.out_proj(op, x)


class T5GemmaForConditionalGeneration(Model):
    config_class = T5GemmaConfig
    task = "seq2seq"
    model_class: type = T5GemmaModel

    def __init__(self, config: T5GemmaConfig) -> None:
        super().__init__()
        self.config = config
        self.model = self.model_class(config)
        decoder = config.decoder
        self.lm_head = (
            TiedLMHead(self.model.decoder.embed_tokens)
            if config.tie_word_embeddings
            else T5GemmaLMHead(decoder.hidden_size, decoder.vocab_size)
        )

    def cache_shapes(self) -> tuple[int, int, int]:
        decoder = self.config.decoder
        return decoder.num_hidden_layers, decoder.num_key_value_heads, decoder.head_dim

    def encode(self, op, input_ids, attention_mask):
        with module_scope(op, self.model):  # the stacks are called outside model's forward
            hidden = self.model.encoder(op, input_ids, attention_mask)
        cross, decoder = [], self.model.decoder
        for layer in decoder.layers:  # computed once here, read at every decoder step
            with module_scope(op, self.model, decoder, layer, layer.cross_attn):
                cross.append(layer.cross_attn.project_kv(op, hidden))
        return hidden, cross

    def decode(self, op, input_ids, encoder_mask, self_cache, cross_cache):
        with module_scope(op, self.model):
            hidden, presents = self.model.decoder(
                op, input_ids, encoder_mask, self_cache, cross_cache
            )
        logits = self.lm_head(op, hidden)
        cap = self.config.decoder.final_logit_softcapping
        return (softcap(op, logits, cap) if cap else logits), presents

    def sanitize(self, weights: dict) -> dict:
        """A tied head reads the decoder's embeddings; a stored copy of them is dropped."""
        if self.config.tie_word_embeddings:
            weights.pop("lm_head.out_proj.weight", None)
        return weights


MODEL_TYPES = {"t5gemma": T5GemmaForConditionalGeneration}
