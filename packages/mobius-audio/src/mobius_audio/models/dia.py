"""Dia (nari-labs): a byte-level text encoder and a decoder over the codebooks of a DAC codec.

Both stacks are pre-norm RMSNorm transformers with rotary attention (rotate-half,
transformers' default schedule) and a gated MLP whose ``gate_up_proj`` makes
``[gate | up]`` (``down(up * act(gate))``). Attention scores are NOT scaled
(transformers' ``scaling = 1``). The decoder embeds each frame as the sum of one
embedding per codebook (channel ``c``'s code ``k`` reads row ``c * vocab + k`` of
``embeddings.embed``), attends causally over its cache (grouped key/value heads),
then over the encoder's states (``cross_attention``, its own head layout), and
``logits_dense`` gives every channel's logits at once. The module tree follows
``DiaForConditionalGeneration`` checkpoints (``model.encoder``, ``model.decoder``,
``logits_dense``); graphs follow :mod:`mobius_audio.tasks_dia`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Attention,
    CrossAttention,
    Embedding,
    Linear,
    RMSNorm,
    RotaryEmbedding,
    causal_bias,
    default_inv_freq,
    get_activation,
    merge_heads,
    module_scope,
    padding_bias,
)
from mobius.config import RopeConfig
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_audio.models.moonshine import rotary_positions
from mobius_audio.models.whisper import _length


@dataclass
class DiaStackConfig:
    """One transformer stack (the encoder's or the decoder's self-attention side)."""

    hidden_size: int
    intermediate_size: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    norm_eps: float
    act: str
    rope_theta: float
    max_positions: int

    @classmethod
    def from_hf(cls, hf: Any, what: str) -> DiaStackConfig:
        rope = RopeConfig.from_hf(hf)
        if rope.rope_type != "default" or rope.partial_rotary_factor != 1.0:
            raise ConfigError(f"dia {what}: only the default full rotary schedule is built")
        heads = hf.num_attention_heads
        kv_heads = hf.num_key_value_heads or heads
        if heads % kv_heads:
            raise ConfigError(f"dia {what}: {heads} heads are not groups of {kv_heads} kv heads")
        return cls(
            hidden_size=hf.hidden_size,
            intermediate_size=hf.intermediate_size,
            layers=hf.num_hidden_layers,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=getattr(hf, "head_dim", None) or hf.hidden_size // heads,
            norm_eps=float(hf.norm_eps),
            act=hf.hidden_act,
            rope_theta=rope.theta,
            max_positions=hf.max_position_embeddings,
        )

    def rotary(self) -> RotaryEmbedding:
        inv_freq = default_inv_freq(self.rope_theta, self.head_dim)
        return RotaryEmbedding(inv_freq, max_positions=self.max_positions)


@dataclass
class DiaConfig:
    """Dia's settings, read from ``DiaConfig`` (``encoder_config`` and ``decoder_config``)."""

    model_type: str
    encoder: DiaStackConfig
    decoder: DiaStackConfig
    text_vocab_size: int
    vocab_size: int  # codes per channel, the special ids included
    num_channels: int
    delay_pattern: list[int]
    cross_heads: int
    cross_kv_heads: int
    cross_head_dim: int
    bos_token_id: int
    eos_token_id: int
    pad_token_id: int

    @property
    def hidden_size(self) -> int:
        return self.decoder.hidden_size

    @classmethod
    def from_hf(cls, hf: Any) -> DiaConfig:
        encoder, decoder = hf.encoder_config, hf.decoder_config
        delays = list(hf.delay_pattern)
        if len(delays) != decoder.num_channels or any(
            not isinstance(d, int) or d < 0 for d in delays
        ):
            raise ConfigError(
                f"dia: delay_pattern {delays} must hold one delay >= 0 per channel "
                f"({decoder.num_channels})"
            )
        if decoder.cross_hidden_size != encoder.hidden_size:
            raise ConfigError("dia: cross_hidden_size must be the encoder's hidden_size")
        if decoder.cross_num_attention_heads % decoder.cross_num_key_value_heads:
            raise ConfigError("dia: cross-attention heads are not groups of its kv heads")
        ids = {k: getattr(decoder, f"{k}_token_id") for k in ("bos", "eos", "pad")}
        if any(not isinstance(v, int) or not 0 <= v < decoder.vocab_size for v in ids.values()):
            raise ConfigError(f"dia: the decoder's bos/eos/pad ids {ids} must index its vocabulary")
        return cls(
            model_type=hf.model_type,
            encoder=DiaStackConfig.from_hf(encoder, "encoder"),
            decoder=DiaStackConfig.from_hf(decoder, "decoder"),
            text_vocab_size=encoder.vocab_size,
            vocab_size=decoder.vocab_size,
            num_channels=decoder.num_channels,
            delay_pattern=delays,
            cross_heads=decoder.cross_num_attention_heads,
            cross_kv_heads=decoder.cross_num_key_value_heads,
            cross_head_dim=decoder.cross_head_dim,
            bos_token_id=ids["bos"],
            eos_token_id=ids["eos"],
            pad_token_id=ids["pad"],
        )


class DiaMLP(nn.Module):
    """``down_proj(up * act(gate))`` with ``gate_up_proj`` making ``[gate | up]``."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str) -> None:
        super().__init__()
        self.gate_up_proj = Linear(hidden_size, 2 * intermediate_size)
        self.down_proj = Linear(intermediate_size, hidden_size)
        self.act = get_activation(act)

    def forward(self, op, x):
        gate, up = op.Split(self.gate_up_proj(op, x), num_outputs=2, axis=-1, _outputs=2)
        return self.down_proj(op, op.Mul(up, self.act(op, gate)))


def self_attention(stack: DiaStackConfig, cls=Attention) -> Attention:
    """Bias-free q/k/v/o projections with unscaled scores (transformers' ``scaling = 1``)."""
    return cls(stack.hidden_size, stack.heads, stack.kv_heads, stack.head_dim, scale=1.0)


class DiaEncoderAttention(Attention):
    """Self-attention over every real text byte (no cache)."""

    def forward(self, op, x, position_embeddings, bias):
        q, k, v = self.project_qkv(op, x)
        q, k = self.rotate(op, q, k, position_embeddings)
        y = op.Attention(q, k, v, bias, scale=self.scale)
        return self.o_proj(op, merge_heads(op, y))


class DiaCrossAttention(CrossAttention):
    """Decoder queries over the encoder's cached keys/values; bias-free, unscaled."""

    projection_names = ("q_proj", "k_proj", "v_proj", "o_proj")


class DiaEncoderLayer(nn.Module):
    def __init__(self, stack: DiaStackConfig) -> None:
        super().__init__()
        d = stack.hidden_size
        self.pre_sa_norm = RMSNorm(d, stack.norm_eps)
        self.self_attention = self_attention(stack, DiaEncoderAttention)
        self.post_sa_norm = RMSNorm(d, stack.norm_eps)
        self.mlp = DiaMLP(d, stack.intermediate_size, stack.act)

    def forward(self, op, x, position_embeddings, bias):
        x = op.Add(x, self.self_attention(op, self.pre_sa_norm(op, x), position_embeddings, bias))
        return op.Add(x, self.mlp(op, self.post_sa_norm(op, x)))


class DiaDecoderLayer(nn.Module):
    def __init__(self, config: DiaConfig) -> None:
        super().__init__()
        stack = config.decoder
        d = stack.hidden_size
        self.self_attention = self_attention(stack)
        self.cross_attention = DiaCrossAttention(
            d, config.cross_heads, config.cross_head_dim, num_kv_heads=config.cross_kv_heads,
            source_size=config.encoder.hidden_size, bias=False, scale=1.0,
        )  # fmt: skip
        self.pre_sa_norm = RMSNorm(d, stack.norm_eps)
        self.pre_ca_norm = RMSNorm(d, stack.norm_eps)
        self.pre_mlp_norm = RMSNorm(d, stack.norm_eps)
        self.mlp = DiaMLP(d, stack.intermediate_size, stack.act)

    def forward(self, op, x, position_embeddings, causal, cross_bias, cross, past):
        h, present = self.self_attention(
            op, self.pre_sa_norm(op, x), position_embeddings, causal, *past
        )
        x = op.Add(x, h)
        x = op.Add(x, self.cross_attention(op, self.pre_ca_norm(op, x), cross_bias, *cross))
        return op.Add(x, self.mlp(op, self.pre_mlp_norm(op, x))), present


class DiaMultiChannelEmbedding(nn.Module):
    """The sum over channels of ``embed[channel * vocab + code]``: ``[b, s, C]`` → ``[b, s, hidden]``."""

    def __init__(self, config: DiaConfig) -> None:
        super().__init__()
        self.embed = Embedding(config.vocab_size * config.num_channels, config.hidden_size)
        self.offsets = np.arange(config.num_channels, dtype=np.int64) * config.vocab_size

    def forward(self, op, codes):
        tokens = op.Add(codes, op.Constant(value=ir.tensor(self.offsets)))
        return op.ReduceSum(self.embed(op, tokens), [2], keepdims=0)


def positions_after(op, past, x):
    """Rotary cos/sin positions ``past .. past + seq`` for ``x [batch, seq, ...]``, as ``[seq]``."""
    end = op.Add(past, _length(op, x, 1))
    return op.Range(op.Squeeze(past, [0]), op.Squeeze(end, [0]), op.Constant(value_int=1))


class DiaEncoder(nn.Module):
    def __init__(self, config: DiaConfig) -> None:
        super().__init__()
        stack = config.encoder
        self.embedding = Embedding(config.text_vocab_size, stack.hidden_size)
        self.layers = nn.ModuleList(DiaEncoderLayer(stack) for _ in range(stack.layers))
        self.norm = RMSNorm(stack.hidden_size, stack.norm_eps)
        self.rotary_emb = stack.rotary()

    def forward(self, op, input_ids, attention_mask):
        x = self.embedding(op, input_ids)
        # Right padding: positions count from 0 in every row, as transformers counts them.
        positions = positions_after(op, op.Constant(value_ints=[0]), x)
        position_embeddings = self.rotary_emb(op, rotary_positions(op, positions, x))
        bias = padding_bias(op, attention_mask, x.dtype)
        for layer in self.layers:
            x = layer(op, x, position_embeddings, bias)
        return self.norm(op, x)


class DiaDecoder(nn.Module):
    def __init__(self, config: DiaConfig) -> None:
        super().__init__()
        stack = config.decoder
        self.embeddings = DiaMultiChannelEmbedding(config)
        self.layers = nn.ModuleList(DiaDecoderLayer(config) for _ in range(stack.layers))
        self.norm = RMSNorm(stack.hidden_size, stack.norm_eps)
        self.rotary_emb = stack.rotary()

    def forward(self, op, codes, encoder_attention_mask, self_cache, cross_cache):
        x = self.embeddings(op, codes)  # [batch, seq, hidden]
        positions = positions_after(op, _length(op, self_cache[0][0], 2), x)
        position_embeddings = self.rotary_emb(op, rotary_positions(op, positions, x))
        causal = causal_bias(op, x, self_cache[0][0], x.dtype)
        cross_bias = padding_bias(op, encoder_attention_mask, x.dtype, queries=x)
        presents = []
        for layer, past, cross in zip(self.layers, self_cache, cross_cache, strict=True):
            x, present = layer(op, x, position_embeddings, causal, cross_bias, cross, past)
            presents.append(present)
        return self.norm(op, x), presents


class DiaModel(nn.Module):
    def __init__(self, config: DiaConfig) -> None:
        super().__init__()
        self.encoder = DiaEncoder(config)
        self.decoder = DiaDecoder(config)


class DiaForConditionalGeneration(Model):
    """``model`` (encoder, decoder) and ``logits_dense`` (every channel's logits)."""

    config_class = DiaConfig
    task = "text-to-dialogue"

    def __init__(self, config: DiaConfig) -> None:
        super().__init__()
        self.config = config
        self.model = DiaModel(config)
        self.logits_dense = Linear(config.hidden_size, config.num_channels * config.vocab_size)

    def encode(self, op, input_ids, attention_mask):
        """The encoder's states and every decoder layer's cross-attention ``(key, value)``."""
        decoder = self.model.decoder
        with module_scope(op, self.model):
            hidden = self.model.encoder(op, input_ids, attention_mask)
            cross = []
            for layer in decoder.layers:  # projected once here, read at every decoder step
                with module_scope(op, decoder, layer, layer.cross_attention):
                    cross.append(layer.cross_attention.project_kv(op, hidden))
        return hidden, cross

    def decode(self, op, codes, encoder_attention_mask, self_cache, cross_cache):
        """Logits ``[batch, seq, channels, vocab]`` and the self-attention presents."""
        with module_scope(op, self):
            with module_scope(op, self.model):
                hidden, presents = self.model.decoder(
                    op, codes, encoder_attention_mask, self_cache, cross_cache
                )
            logits = self.logits_dense(op, hidden)
        shape = [0, 0, self.config.num_channels, self.config.vocab_size]
        return op.Reshape(logits, op.Constant(value_ints=shape)), presents


MODEL_TYPES = {"dia": DiaForConditionalGeneration}
