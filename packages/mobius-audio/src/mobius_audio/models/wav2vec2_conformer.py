"""Wav2Vec2-Conformer: the wav2vec2 conv feature encoder and projection, then conformer blocks.

Each block is macaron-style: half a feed-forward, self-attention (relative
Transformer-XL positions with ``pos_bias_u``/``pos_bias_v``, rotary positions on
the attention input, or none), a depthwise conv module (pointwise conv + GLU,
depthwise conv, BatchNorm, pointwise conv), the other half feed-forward and a
LayerNorm. The blocks, attention and conv module are shared with Wav2Vec2-BERT
(``wav2vec2_bert.py`` subclasses what it changes). The checkpoint's
``encoder.pos_conv_embed`` is built by transformers but never called.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    BatchNorm,
    LayerNorm,
    Linear,
    bidirectional_attention,
    default_inv_freq,
    get_activation,
    padding_bias,
)
from mobius.errors import ConfigError
from mobius_audio.models.wav2vec2 import (
    Conv1d,
    Wav2Vec2Config,
    Wav2Vec2FeedForward,
    Wav2Vec2ForCTC,
    Wav2Vec2Model,
)


@dataclass
class Wav2Vec2ConformerConfig(Wav2Vec2Config):
    position_embeddings_type: str | None = "relative"
    rotary_embedding_base: float = 10000.0
    conv_depthwise_kernel_size: int = 31
    conformer_norm_eps: float = 1e-5  # the blocks' LayerNorms (Wav2Vec2-BERT: layer_norm_eps)
    built_positions = (None, "relative", "rotary")  # the position_embeddings_type values built

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "add_adapter", False):
            raise ConfigError(f"{hf_config.model_type} adapters (add_adapter) are not built")
        return dict(super().hf_fields(hf_config), **cls.conformer_fields(hf_config))

    @classmethod
    def conformer_fields(cls, hf_config: Any) -> dict[str, Any]:
        """The conformer options, checked: unknown position types and even kernels are refused."""
        kind = hf_config.position_embeddings_type
        if kind not in cls.built_positions:
            raise ConfigError(
                f"{hf_config.model_type} position_embeddings_type={kind!r} is not built; "
                f"built: {', '.join(map(repr, cls.built_positions))}"
            )
        kernel = hf_config.conv_depthwise_kernel_size
        if kernel % 2 == 0:
            raise ConfigError(f"conv_depthwise_kernel_size={kernel} must be odd")
        return dict(
            position_embeddings_type=kind,
            rotary_embedding_base=float(hf_config.rotary_embedding_base),
            conv_depthwise_kernel_size=kernel,
        )


def _const(op, value: float, like):
    return op.CastLike(op.Constant(value=ir.tensor(np.array(value, np.float32))), like)


def rel_shift(op, scores, frames):
    """Transformer-XL's skew of ``[b, h, f, 2f-1]`` position scores into ``[b, h, f(q), f(k)]``.

    Pad one column on the left, fold to ``[2f, f]``, drop the first row, unfold to
    ``[f, 2f-1]``, keep the first ``f`` columns: query ``i`` then reads the
    distance ``i - j`` for key ``j`` (``frames`` is the 1-D shape slice ``[f]``).
    """
    scores = op.Pad(scores, op.Constant(value_ints=[0, 0, 0, 1, 0, 0, 0, 0]))
    scores = op.Reshape(scores, op.Concat(op.Constant(value_ints=[0, 0, -1]), frames, axis=0))
    scores = op.Slice(scores, [1], [np.iinfo(np.int64).max], [2])  # [b, h, 2f-1, f]
    scores = op.Reshape(scores, op.Concat(op.Constant(value_ints=[0, 0]), frames, [-1], axis=0))
    return op.Slice(scores, op.Constant(value_ints=[0]), frames, [3])


class RelPositionalEmbedding(nn.Module):
    """Sinusoids ``[2*frames - 1, hidden]`` for relative positions ``frames-1 .. -(frames-1)``.

    Sin and cos interleaved, as transformers' table (computed for any length, so
    ``max_source_positions`` does not bound it).
    """

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        exponents = np.arange(0, hidden_size, 2, dtype=np.int64).astype(np.float32)
        self.div_term = np.exp(exponents * np.float32(-(math.log(10000.0) / hidden_size)))
        self.hidden_size = hidden_size

    def forward(self, op, x):  # x [batch, frames, hidden]
        frames = op.Squeeze(op.Shape(x, start=1, end=2), [0])
        one = op.Constant(value_int=1)
        positions = op.Range(op.Sub(frames, one), op.Neg(frames), op.Neg(one))  # [2f-1]
        angles = op.Mul(
            op.Unsqueeze(op.Cast(positions, to=ir.DataType.FLOAT), [1]),
            op.Constant(value=ir.tensor(self.div_term)),
        )  # [2f-1, hidden/2]
        pairs = op.Concat(
            op.Unsqueeze(op.Sin(angles), [2]), op.Unsqueeze(op.Cos(angles), [2]), axis=2
        )
        return op.CastLike(op.Reshape(pairs, [-1, self.hidden_size]), x)


class RotaryPositionalEmbedding(nn.Module):
    """cos, sin ``[frames, 1, head_dim]`` (frequencies repeated twice, rotate-half layout).

    ``saved``: the checkpoint carries ``inv_freq`` (Wav2Vec2-Conformer saves the
    buffer); otherwise it is ``1 / base^(2i/d)``, as Wav2Vec2-BERT rebuilds it.
    """

    def __init__(self, head_dim: int, base: float, saved: bool) -> None:
        super().__init__()
        self.inv_freq = nn.Parameter([head_dim // 2]) if saved else None
        self.default = default_inv_freq(base, head_dim)

    def forward(self, op, x):  # x [batch, frames, hidden]
        inv_freq = self.inv_freq
        if inv_freq is None:
            inv_freq = op.Constant(value=ir.tensor(self.default))
        frames = op.Squeeze(op.Shape(x, start=1, end=2), [0])
        times = op.Cast(
            op.Range(op.Constant(value_int=0), frames, op.Constant(value_int=1)),
            to=ir.DataType.FLOAT,
        )
        freqs = op.Mul(op.Unsqueeze(times, [1]), op.Unsqueeze(inv_freq, [0]))  # [frames, d/2]
        angles = op.Unsqueeze(op.Concat(freqs, freqs, axis=-1), [1])  # [frames, 1, d]
        return op.CastLike(op.Cos(angles), x), op.CastLike(op.Sin(angles), x)


class Wav2Vec2ConformerSelfAttention(nn.Module):
    """Self-attention with relative (Transformer-XL), rotary or no position embeddings."""

    def __init__(self, config: Wav2Vec2ConformerConfig) -> None:
        super().__init__()
        d, heads = config.hidden_size, config.num_attention_heads
        self.linear_q, self.linear_k = Linear(d, d, True), Linear(d, d, True)
        self.linear_v, self.linear_out = Linear(d, d, True), Linear(d, d, True)
        self.kind = config.position_embeddings_type
        self.num_heads, self.head_size = heads, d // heads
        self.scale = self.head_size**-0.5
        if self.kind == "relative":
            self.linear_pos = Linear(d, d, False)
            self.pos_bias_u = nn.Parameter([heads, self.head_size])
            self.pos_bias_v = nn.Parameter([heads, self.head_size])

    def heads(self, op, x):  # [batch, frames, hidden] -> [batch, heads, frames, head_size]
        return op.Transpose(op.Reshape(x, [0, 0, self.num_heads, -1]), perm=[0, 2, 1, 3])

    def rotate(self, op, x, cos_sin):
        """Rotary positions on the attention *input*, per head of ``head_size`` channels."""
        cos, sin = cos_sin
        x = op.Reshape(x, [0, 0, self.num_heads, -1])  # [batch, frames, heads, head_size]
        half = self.head_size // 2
        first = op.Slice(x, [0], [half], [3])
        second = op.Slice(x, [half], [self.head_size], [3])
        rotated = op.Concat(op.Neg(second), first, axis=3)
        return op.Reshape(op.Add(op.Mul(x, cos), op.Mul(rotated, sin)), [0, 0, -1])

    def position_bias(self, op, q, positions):
        """The query the scores use and the additive position scores ``[batch, heads, f, f]`` (or None)."""
        if self.kind != "relative":
            return q, None
        pos = self.heads(op, op.Unsqueeze(self.linear_pos(op, positions), [0]))  # [1, h, 2f-1, d]
        with_v = self.heads(op, op.Add(q, op.Reshape(self.pos_bias_v, [-1])))
        scores = op.MatMul(with_v, op.Transpose(pos, perm=[0, 1, 3, 2]))  # [b, h, f, 2f-1]
        scores = rel_shift(op, scores, op.Shape(q, start=1, end=2))  # [b, h, f, f]
        q = op.Add(q, op.Reshape(self.pos_bias_u, [-1]))
        return q, op.Mul(scores, _const(op, self.scale, scores))

    def forward(self, op, x, bias, positions):
        qk = self.rotate(op, x, positions) if self.kind == "rotary" else x
        q, k, v = self.linear_q(op, qk), self.linear_k(op, qk), self.linear_v(op, x)
        q, scores = self.position_bias(op, q, positions)
        if scores is not None:
            bias = op.Add(bias, scores)  # [batch, heads, frames, frames]
        out = bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)
        return self.linear_out(op, out)


class Wav2Vec2ConformerConvolutionModule(nn.Module):
    """LayerNorm, pointwise conv + GLU, depthwise conv and its norm, activation, pointwise conv."""

    def __init__(self, config: Wav2Vec2ConformerConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.layer_norm = LayerNorm(d, config.conformer_norm_eps)
        self.pointwise_conv1 = Conv1d(d, 2 * d, 1, bias=False)
        self.pointwise_conv2 = Conv1d(d, d, 1, bias=False)
        self.act = get_activation(config.hidden_act)
        self.build_depthwise(config)

    def build_depthwise(self, config: Wav2Vec2ConformerConfig) -> None:
        d, k = config.hidden_size, config.conv_depthwise_kernel_size
        self.depthwise_conv = Conv1d(d, d, k, bias=False, pad=(k - 1) // 2, groups=d)
        self.batch_norm = BatchNorm(d)

    def depthwise(self, op, x):  # [batch, hidden, frames]
        return self.batch_norm(op, self.depthwise_conv(op, x))

    def mask_padding(self, op, x, frame_mask):
        return x  # Wav2Vec2-Conformer lets padded frames into the conv

    def forward(self, op, x, frame_mask):
        x = self.mask_padding(op, self.layer_norm(op, x), frame_mask)
        x = self.pointwise_conv1(op, op.Transpose(x, perm=[0, 2, 1]))  # [batch, 2*hidden, frames]
        a, b = op.Split(x, axis=1, num_outputs=2, _outputs=2)
        x = self.act(op, self.depthwise(op, op.Mul(a, op.Sigmoid(b))))  # GLU
        return op.Transpose(self.pointwise_conv2(op, x), perm=[0, 2, 1])


class Wav2Vec2ConformerEncoderLayer(nn.Module):
    """Half FFN, self-attention, conv module, half FFN, LayerNorm; each with its residual."""

    attention_class = Wav2Vec2ConformerSelfAttention
    conv_module_class = Wav2Vec2ConformerConvolutionModule

    def __init__(self, config: Wav2Vec2ConformerConfig) -> None:
        super().__init__()
        d, eps = config.hidden_size, config.conformer_norm_eps
        self.ffn1_layer_norm, self.ffn1 = LayerNorm(d, eps), Wav2Vec2FeedForward(config)
        self.self_attn_layer_norm = LayerNorm(d, eps)
        self.self_attn = self.attention_class(config)
        self.conv_module = self.conv_module_class(config)
        self.ffn2_layer_norm, self.ffn2 = LayerNorm(d, eps), Wav2Vec2FeedForward(config)
        self.final_layer_norm = LayerNorm(d, eps)

    def forward(self, op, x, bias, positions, frame_mask):
        half = _const(op, 0.5, x)
        x = op.Add(op.Mul(self.ffn1(op, self.ffn1_layer_norm(op, x)), half), x)
        x = op.Add(self.self_attn(op, self.self_attn_layer_norm(op, x), bias, positions), x)
        x = op.Add(x, self.conv_module(op, x, frame_mask))
        x = op.Add(op.Mul(self.ffn2(op, self.ffn2_layer_norm(op, x)), half), x)
        return self.final_layer_norm(op, x)


class Wav2Vec2ConformerEncoder(nn.Module):
    layer_class = Wav2Vec2ConformerEncoderLayer
    inv_freq_saved = True  # the rotary buffer is in the checkpoint
    final_norm = True

    def __init__(self, config: Wav2Vec2ConformerConfig) -> None:
        super().__init__()
        d, kind = config.hidden_size, config.position_embeddings_type
        self.embed_positions = None
        if kind == "relative":
            self.embed_positions = RelPositionalEmbedding(d)
        elif kind == "rotary":
            head_dim = d // config.num_attention_heads
            self.embed_positions = RotaryPositionalEmbedding(
                head_dim, config.rotary_embedding_base, self.inv_freq_saved
            )
        self.layers = nn.ModuleList(
            [self.layer_class(config) for _ in range(config.num_hidden_layers)]
        )
        self.layer_norm = LayerNorm(d, config.layer_norm_eps) if self.final_norm else None

    def attention_bias(self, op, x, frame_mask):
        """The additive self-attention mask ``[batch, 1, frames, frames]``: every real frame."""
        return padding_bias(op, frame_mask, x.dtype or ir.DataType.FLOAT)

    def forward(self, op, x, frame_mask):
        """``x`` [batch, frames, hidden], ``frame_mask`` bool [batch, frames]; the output and the layer states."""
        x = op.Where(op.Unsqueeze(frame_mask, [2]), x, _const(op, 0.0, x))  # padded frames 0
        bias = self.attention_bias(op, x, frame_mask)
        positions = self.embed_positions(op, x) if self.embed_positions is not None else None
        states = [x]  # as transformers records them: the first layer's input, each layer's output
        for layer in self.layers:
            x = layer(op, x, bias, positions, frame_mask)
            states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(op, x)
        return x, states


class Wav2Vec2ConformerModel(Wav2Vec2Model):
    encoder_class = Wav2Vec2ConformerEncoder


class Wav2Vec2ConformerForCTC(Wav2Vec2ForCTC):
    config_class = Wav2Vec2ConformerConfig
    base_model_prefix = "wav2vec2_conformer"
    model_class = Wav2Vec2ConformerModel
    # under the prefix: the position conv transformers builds but never calls, BatchNorm's counters
    unused_weights = (
        "encoder.pos_conv_embed.*",
        "encoder.layers.*.conv_module.batch_norm.num_batches_tracked",
    )

    @property
    def ignored(self) -> tuple[str, ...]:
        """Also :attr:`unused_weights`: tensors the checkpoint has that transformers never uses."""
        prefix = self.base_model_prefix
        return (*super().ignored, *(f"{prefix}.{p}" for p in self.unused_weights))


MODEL_TYPES = {"wav2vec2-conformer": Wav2Vec2ConformerForCTC}
