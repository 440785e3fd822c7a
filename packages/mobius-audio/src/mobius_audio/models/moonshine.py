"""Moonshine: a conv front end over the raw waveform, rotary pre-norm layers, a gated decoder MLP.

Three unpadded convolutions (127-wide stride 64 without a bias and tanh, then a
one-group GroupNorm; 7-wide stride 3 and 3-wide stride 2, each with exact GELU)
turn ``[batch, samples]`` into ``[batch, states, hidden]``; the sample mask is
reduced as transformers reduces it (every 384th sample, cut to the states).
Encoder and decoder layers are pre-norm with bias-free LayerNorms; self-attention
rotates adjacent channel pairs (GPT-J layout) of the first
``2 * len(inv_freq)`` channels, ``inv_freq`` over ``int(head_dim *
partial_rotary_factor)``; cross-attention has no rotation. The encoder MLP is
``fc2(act(fc1 x))``; the decoder's ``fc1`` makes ``[value | gate]`` and
``fc2(act(gate) * value)``. ``o_proj`` has no bias; ``proj_out`` is tied to the
decoder's embeddings. The module tree follows
``MoonshineForConditionalGeneration`` checkpoints; graphs follow the masked form
of :class:`mobius_audio.tasks.SpeechToTextTask`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Attention,
    CrossAttention,
    Embedding,
    GroupNorm,
    LayerNorm,
    Linear,
    RotaryEmbedding,
    causal_bias,
    default_inv_freq,
    get_activation,
    padding_bias,
)
from mobius.config import RopeConfig
from mobius.errors import ConfigError
from mobius_audio.models.whisper import WhisperForConditionalGeneration, _length

INT64 = ir.DataType.INT64
# (kernel, stride) of conv1..conv3; the mask keeps one sample per product of the strides.
CONVS = ((127, 64), (7, 3), (3, 2))
MASK_STRIDE = 64 * 3 * 2


@dataclass
class MoonshineConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    encoder_layers: int
    decoder_layers: int
    num_heads: int
    encoder_act: str
    decoder_act: str
    rope_theta: float
    partial_rotary_factor: float
    max_position_embeddings: int
    attention_bias: bool = False
    tie_word_embeddings: bool = True
    decoder_start_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @classmethod
    def from_hf(cls, hf: Any) -> MoonshineConfig:
        """``pad_head_dim_to_multiple_of`` is read as a no-op: zero channels on q, k, v, cut after."""
        heads = hf.encoder_num_attention_heads
        # transformers' attention reshapes queries by the key/value head count and writes
        # each stack's head count into the shared config: it runs only with one count.
        counts = {
            heads,
            hf.decoder_num_attention_heads,
            hf.encoder_num_key_value_heads,
            hf.decoder_num_key_value_heads,
        }
        if len(counts) != 1:
            raise ConfigError(
                "moonshine: encoder/decoder attention and key/value head counts must all be equal "
                f"(got {sorted(counts)}); transformers runs no other layout"
            )
        if hf.hidden_size % heads or getattr(hf, "head_dim", None) not in (None, hf.hidden_size // heads):  # fmt: skip
            raise ConfigError("moonshine: head_dim must be hidden_size / heads")
        rope = RopeConfig.from_hf(hf)
        if rope.rope_type != "default":
            raise ConfigError(
                f"moonshine: rope_type {rope.rope_type!r} is not built (only default)"
            )
        return cls(
            model_type=hf.model_type,
            vocab_size=hf.vocab_size,
            hidden_size=hf.hidden_size,
            intermediate_size=hf.intermediate_size,
            encoder_layers=hf.encoder_num_hidden_layers,
            decoder_layers=hf.decoder_num_hidden_layers,
            num_heads=heads,
            encoder_act=hf.encoder_hidden_act,
            decoder_act=hf.decoder_hidden_act,
            rope_theta=rope.theta,
            partial_rotary_factor=rope.partial_rotary_factor,
            max_position_embeddings=hf.max_position_embeddings,
            attention_bias=bool(hf.attention_bias),
            tie_word_embeddings=bool(getattr(hf, "tie_word_embeddings", True)),
            decoder_start_token_id=hf.decoder_start_token_id,
            eos_token_id=hf.eos_token_id,
        )


def rotary(config: MoonshineConfig) -> RotaryEmbedding:
    """transformers' default schedule over ``int(head_dim * partial_rotary_factor)`` channels."""
    dim = int(config.head_dim * config.partial_rotary_factor)
    inv_freq = default_inv_freq(config.rope_theta, dim)
    return RotaryEmbedding(inv_freq, max_positions=config.max_position_embeddings)


def rotary_positions(op, positions, x):
    """``positions [seq]`` as ``[batch, seq]``, the batch of ``x [batch, seq, hidden]``."""
    shape = op.Concat(_length(op, x, 0), op.Shape(positions), axis=0)
    return op.Expand(op.Unsqueeze(positions, [0]), shape)


class MoonshineAttention(Attention):
    """q/k/v/o projections (``o_proj`` without a bias); rotary pairs are adjacent channels."""

    interleaved_rotary = True

    def __init__(self, config: MoonshineConfig) -> None:
        width = len(rotary(config).inv_freq)  # cos covers 2 * width channels
        super().__init__(
            config.hidden_size, config.num_heads, config.num_heads, config.head_dim,
            bias=config.attention_bias, rotary_dim=2 * width,
        )  # fmt: skip

    def merge(self, op, y):
        """``[batch, heads, seq, dim]`` → ``[batch, seq, heads*dim]``."""
        return op.Reshape(op.Transpose(y, perm=[0, 2, 1, 3]), op.Constant(value_ints=[0, 0, -1]))


class MoonshineEncoderAttention(MoonshineAttention):
    """Encoder self-attention over every state, padded keys masked (no cache)."""

    def forward(self, op, x, position_embeddings, bias):
        q, k, v = self.project_qkv(op, x)
        q, k = self.rotate(op, q, k, position_embeddings)
        y = op.Attention(q, k, v, bias, scale=self.scale)
        return self.o_proj(op, self.merge(op, y))


class MoonshineCrossAttention(CrossAttention):
    """``encoder_attn``: no rotation; ``o_proj`` has no bias."""

    projection_names = ("q_proj", "k_proj", "v_proj", "o_proj")


class MoonshineEncoderMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, act: str) -> None:
        super().__init__()
        self.fc1 = Linear(hidden_size, intermediate_size, bias=True)
        self.fc2 = Linear(intermediate_size, hidden_size, bias=True)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.fc2(op, self.act(op, self.fc1(op, x)))


class MoonshineDecoderMLP(MoonshineEncoderMLP):
    """``fc1`` makes ``[value | gate]``; ``fc2(act(gate) * value)``."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str) -> None:
        super().__init__(hidden_size, intermediate_size, act)
        self.fc1 = Linear(hidden_size, 2 * intermediate_size, bias=True)

    def forward(self, op, x):
        value, gate = op.Split(self.fc1(op, x), num_outputs=2, axis=-1, _outputs=2)
        return self.fc2(op, op.Mul(self.act(op, gate), value))


class MoonshineEncoderLayer(nn.Module):
    def __init__(self, config: MoonshineConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.self_attn = MoonshineEncoderAttention(config)
        self.input_layernorm = LayerNorm(d, 1e-5, bias=False)
        self.post_attention_layernorm = LayerNorm(d, 1e-5, bias=False)
        self.mlp = MoonshineEncoderMLP(d, config.intermediate_size, config.encoder_act)

    def forward(self, op, x, position_embeddings, bias):
        h = self.self_attn(op, self.input_layernorm(op, x), position_embeddings, bias)
        x = op.Add(x, h)
        return op.Add(x, self.mlp(op, self.post_attention_layernorm(op, x)))


class MoonshineDecoderLayer(nn.Module):
    def __init__(self, config: MoonshineConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.self_attn = MoonshineAttention(config)
        self.encoder_attn = MoonshineCrossAttention(
            d, config.num_heads, config.head_dim, bias=config.attention_bias, out_bias=False
        )
        self.input_layernorm = LayerNorm(d, 1e-5, bias=False)
        self.post_attention_layernorm = LayerNorm(d, 1e-5, bias=False)
        self.final_layernorm = LayerNorm(d, 1e-5, bias=False)
        self.mlp = MoonshineDecoderMLP(d, config.intermediate_size, config.decoder_act)

    def forward(self, op, x, position_embeddings, causal, cross_bias, cross, past):
        h, present = self.self_attn(
            op, self.input_layernorm(op, x), position_embeddings, causal, *past
        )
        x = op.Add(x, h)
        h = self.encoder_attn(op, self.post_attention_layernorm(op, x), cross_bias, *cross)
        x = op.Add(x, h)
        return op.Add(x, self.mlp(op, self.final_layernorm(op, x))), present


class Conv1d(nn.Module):
    """An unpadded strided ``Conv`` over ``[batch, channels, time]`` (checkpoint ``weight [out, in, k]``)."""

    def __init__(self, channels: tuple[int, int], kernel: int, stride: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter([channels[1], channels[0], kernel])
        self.bias = nn.Parameter([channels[1]]) if bias else None
        self.kernel, self.stride = kernel, stride

    def forward(self, op, x):
        inputs = [x, self.weight] + ([self.bias] if self.bias is not None else [])
        return op.Conv(*inputs, kernel_shape=[self.kernel], strides=[self.stride])


class MoonshineEncoder(nn.Module):
    def __init__(self, config: MoonshineConfig) -> None:
        super().__init__()
        d = config.hidden_size
        (k1, s1), (k2, s2), (k3, s3) = CONVS
        self.conv1 = Conv1d((1, d), k1, s1, bias=False)
        self.groupnorm = GroupNorm(1, d, eps=1e-5, spatial_dims=1)
        self.conv2 = Conv1d((d, 2 * d), k2, s2, bias=True)
        self.conv3 = Conv1d((2 * d, d), k3, s3, bias=True)
        self.layers = nn.ModuleList(MoonshineEncoderLayer(config) for _ in range(config.encoder_layers))  # fmt: skip
        self.layer_norm = LayerNorm(d, 1e-5, bias=False)
        self.rotary_emb = rotary(config)

    def forward(self, op, input_values, attention_mask):
        x = op.Tanh(self.conv1(op, op.Unsqueeze(input_values, [1])))  # [batch, d, frames]
        x = self.groupnorm(op, x)  # over every frame, padded ones included (as transformers)
        x = op.Gelu(self.conv2(op, x), approximate="none")
        x = op.Gelu(self.conv3(op, x), approximate="none")
        x = op.Transpose(x, perm=[0, 2, 1])  # [batch, states, d]
        states = op.Squeeze(_length(op, x, 1), [0])
        positions = op.Range(op.Constant(value_int=0), states, op.Constant(value_int=1))
        position_embeddings = self.rotary_emb(op, rotary_positions(op, positions, x))
        bias = padding_bias(op, attention_mask, x.dtype)
        for layer in self.layers:
            x = layer(op, x, position_embeddings, bias)
        return self.layer_norm(op, x)


class MoonshineDecoder(nn.Module):
    def __init__(self, config: MoonshineConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.embed_tokens = Embedding(config.vocab_size, d)
        self.layers = nn.ModuleList(MoonshineDecoderLayer(config) for _ in range(config.decoder_layers))  # fmt: skip
        self.norm = LayerNorm(d, 1e-5, bias=False)
        self.rotary_emb = rotary(config)

    def forward(self, op, input_ids, encoder_attention_mask, self_cache, cross_cache):
        x = self.embed_tokens(op, input_ids)  # no embedding scale
        past = _length(op, self_cache[0][0], 2)
        end = op.Add(past, _length(op, input_ids, 1))
        positions = op.Range(op.Squeeze(past, [0]), op.Squeeze(end, [0]), op.Constant(value_int=1))
        position_embeddings = self.rotary_emb(op, rotary_positions(op, positions, x))
        causal = causal_bias(op, input_ids, self_cache[0][0], x.dtype)  # [batch, 1, seq, total]
        cross_bias = padding_bias(op, encoder_attention_mask, x.dtype, queries=input_ids)
        presents = []
        for layer, past_kv, cross in zip(self.layers, self_cache, cross_cache, strict=True):
            x, present = layer(op, x, position_embeddings, causal, cross_bias, cross, past_kv)
            presents.append(present)
        return self.norm(op, x), presents


class MoonshineModel(nn.Module):
    def __init__(self, config: MoonshineConfig) -> None:
        super().__init__()
        self.encoder = MoonshineEncoder(config)
        self.decoder = MoonshineDecoder(config)


class MoonshineForConditionalGeneration(WhisperForConditionalGeneration):
    """``model`` (encoder, decoder) and ``proj_out``, tied to the decoder's embeddings."""

    config_class = MoonshineConfig
    model_class = MoonshineModel

    def speech_input(self) -> tuple[str, list]:
        """The waveform the extractor returns (Wav2Vec2FeatureExtractor, 16 kHz)."""
        return "input_values", ["batch", "samples"]

    def encoder_attention_mask(self, op, input_values, attention_mask):
        """Every 384th sample's mask, cut to the states: ``(n - k) // s + 1`` through each conv."""
        states = _length(op, input_values, 1)
        for kernel, stride in CONVS:
            states = op.Add(op.Div(op.Sub(states, kernel), stride), 1)
        every = op.Slice(attention_mask, [0], [2**62], [1], [MASK_STRIDE])  # [batch, ceil(n / 384)]
        return op.Slice(every, [0], states, [1])  # [batch, states]

    def cache_shapes(self) -> tuple[int, int, int]:
        config = self.config
        return config.decoder_layers, config.num_heads, config.head_dim


MODEL_TYPES = {"moonshine": MoonshineForConditionalGeneration}
