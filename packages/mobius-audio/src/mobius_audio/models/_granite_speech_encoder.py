"""Granite Speech's CTC conformer encoder (transformers' ``GraniteSpeechCTCEncoder``).

Over the extractor's stacked log-mel frames ``[batch, frames, input_dim]``: ``input_linear``,
then ``num_layers`` conformer blocks (half-step feed-forward, block-local self-attention,
the conv module, half-step feed-forward, ``post_norm``). After block ``num_layers // 2``
the states also pass through the CTC head ``out`` and its softmax, which ``out_mid`` maps
back and adds (the mid-layer residual the checkpoint was trained with).

The attention cuts the sequence into blocks of ``context_size`` frames (the last one
padded with zeros) and attends within each block only, with Shaw's relative positions:
a score bias ``q . rel_pos_emb[i - j + max_pos_emb] * scale`` per query ``i`` and key
``j``. In the padded last block, pairs with a padding frame take the lowest float as
bias (the padding queries are cut before ``to_out``). There is no key mask beyond that:
transformers runs a batch over its zero-padded frames, and so does the graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import BatchNorm, Embedding, LayerNorm, Linear
from mobius.errors import ConfigError
from mobius_audio.models._audio_lm import positive_int

INT64 = ir.DataType.INT64
LOWEST = float(np.finfo(np.float32).min)  # transformers' ``-finfo.max`` mask value


@dataclass(frozen=True)
class GraniteSpeechEncoderConfig:
    """The sizes of a ``granite_speech_encoder`` config (``encoder_config``)."""

    input_dim: int
    num_layers: int
    hidden_dim: int
    feedforward_mult: int
    num_heads: int
    dim_head: int
    output_dim: int
    context_size: int
    max_pos_emb: int
    conv_kernel_size: int
    conv_expansion_factor: int

    @classmethod
    def from_hf(cls, hf: Any) -> GraniteSpeechEncoderConfig:
        names = [field for field in cls.__dataclass_fields__ if field != "dim_head"]
        fields = {name: positive_int(hf, name, "encoder_config") for name in names}
        dim_head = getattr(hf, "dim_head", None)
        fields["dim_head"] = (
            fields["hidden_dim"] // fields["num_heads"]
            if dim_head is None
            else positive_int(hf, "dim_head", "encoder_config")
        )
        if fields["context_size"] > fields["max_pos_emb"]:
            raise ConfigError(
                f"encoder_config.context_size {fields['context_size']} exceeds max_pos_emb "
                f"{fields['max_pos_emb']}"
            )
        return cls(**fields)

    @property
    def output_width(self) -> int:
        """The width of the states the encoder gives the projector."""
        return self.hidden_dim

    def relative_distances(self) -> np.ndarray:
        """``[context, context]`` rows of ``rel_pos_emb`` per query and key (transformers'
        ``attention_dists`` buffer, which the checkpoint does not hold)."""
        seq = np.arange(self.context_size)
        distance = np.clip(seq[:, None] - seq[None, :], -self.context_size, self.context_size)
        return (distance + self.max_pos_emb).astype(np.int64)


def _ints(op, *values: int):
    return op.Constant(value=ir.tensor(np.array(values, np.int64)))


class FeedForward(nn.Module):
    """``down_proj(silu(up_proj(pre_norm(x))))``."""

    def __init__(self, config: GraniteSpeechEncoderConfig) -> None:
        super().__init__()
        d = config.hidden_dim
        self.pre_norm = LayerNorm(d, 1e-5)
        self.up_proj = Linear(d, d * config.feedforward_mult, bias=True)
        self.down_proj = Linear(d * config.feedforward_mult, d, bias=True)

    def forward(self, op, x):
        h = self.up_proj(op, self.pre_norm(op, x))
        return self.down_proj(op, op.Mul(h, op.Sigmoid(h)))


class BlockAttention(nn.Module):
    """Self-attention within blocks of ``context_size`` frames, Shaw's relative positions."""

    def __init__(self, config: GraniteSpeechEncoderConfig) -> None:
        super().__init__()
        inner = config.dim_head * config.num_heads
        self.pre_norm = LayerNorm(config.hidden_dim, 1e-5)
        self.to_q = Linear(config.hidden_dim, inner, bias=False)
        self.to_kv = Linear(config.hidden_dim, 2 * inner, bias=False)
        self.to_out = Linear(inner, config.hidden_dim, bias=True)
        self.rel_pos_emb = Embedding(2 * config.max_pos_emb + 1, config.dim_head)
        self.config = config

    def _blocks(self, op, x):
        """``[batch, padded frames, inner]`` -> ``[batch * blocks, heads, context, dim_head]``."""
        c = self.config
        x = op.Reshape(x, _ints(op, -1, c.context_size, c.num_heads, c.dim_head))
        return op.Transpose(x, perm=[0, 2, 1, 3])

    def forward(self, op, x):
        c = self.config
        frames = op.Shape(x, start=1, end=2)
        context = _ints(op, c.context_size)
        pad = op.Mod(op.Sub(context, op.Mod(frames, context)), context)
        h = self.pre_norm(op, x)
        h = op.Pad(h, op.Concat(_ints(op, 0, 0, 0, 0), pad, _ints(op, 0), axis=0))
        padded = op.Shape(h, start=1, end=2)
        blocks = op.Div(padded, context)
        q = self._blocks(op, self.to_q(op, h))
        key, value = op.Split(self.to_kv(op, h), num_outputs=2, axis=-1, _outputs=2)
        k, v = self._blocks(op, key), self._blocks(op, value)
        scale = c.dim_head**-0.5
        distances = op.Constant(value=ir.tensor(c.relative_distances()))
        relative = self.rel_pos_emb(op, distances)  # [context, context, dim_head]
        bias = op.Mul(op.Einsum(q, relative, equation="bhcd,crd->bhcr"), scale)
        # pairs with a padding frame (the last block's tail) take the lowest bias
        index = op.Range(
            op.Constant(value_int=0), op.Squeeze(padded, [0]), op.Constant(value_int=1)
        )
        index = op.Reshape(index, op.Concat(blocks, context, axis=0))
        real = op.Less(index, frames)  # [blocks, context]
        pair = op.And(op.Unsqueeze(real, [2]), op.Unsqueeze(real, [1]))  # [blocks, C, C]
        batch = op.Shape(x, start=0, end=1)
        pair = op.Expand(op.Unsqueeze(pair, [0]), op.Concat(batch, _ints(op, 1, 1, 1), axis=0))
        pair = op.Reshape(pair, _ints(op, -1, 1, c.context_size, c.context_size))
        bias = op.Where(pair, bias, op.CastLike(op.Constant(value_float=LOWEST), bias))
        scores = op.Add(op.Mul(op.MatMul(q, op.Transpose(k, perm=[0, 1, 3, 2])), scale), bias)
        out = op.MatMul(op.Softmax(scores, axis=-1), v)  # [batch * blocks, H, C, dim_head]
        merged = op.Concat(batch, _ints(op, -1, c.num_heads * c.dim_head), axis=0)
        out = op.Reshape(op.Transpose(out, perm=[0, 2, 1, 3]), merged)  # [batch, padded, inner]
        out = op.Slice(out, _ints(op, 0), frames, _ints(op, 1))  # axis 1: the real frames
        return self.to_out(op, out)


class _Conv1d(nn.Module):
    """``torch.nn.Conv1d``'s weight ``[out, in / groups, k]`` (and bias) over ``[batch, C, T]``."""

    def __init__(self, c_in: int, c_out: int, kernel: int, groups: int = 1, bias: bool = True):
        super().__init__()
        self.weight = nn.Parameter([c_out, c_in // groups, kernel])
        self.bias = nn.Parameter([c_out]) if bias else None
        self.groups = groups
        # transformers pads ``(k // 2, k // 2 - (k + 1) % 2)``: symmetric for an odd kernel
        self.pads = [kernel // 2, kernel // 2 - (kernel + 1) % 2]

    def forward(self, op, x):
        args = [x, self.weight] + ([self.bias] if self.bias is not None else [])
        return op.Conv(*args, group=self.groups, pads=self.pads)


class _DepthwiseConv(nn.Module):
    """transformers' ``depth_conv`` wrapper: the conv sits under ``.conv``."""

    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.conv = _Conv1d(channels, channels, kernel, groups=channels, bias=False)

    def forward(self, op, x):
        return self.conv(op, x)


class ConvModule(nn.Module):
    """``norm``, ``up_conv`` (1x1) and GLU, ``depth_conv``, ``batch_norm`` and SiLU, ``down_conv``."""

    def __init__(self, config: GraniteSpeechEncoderConfig) -> None:
        super().__init__()
        d, inner = config.hidden_dim, config.hidden_dim * config.conv_expansion_factor
        self.norm = LayerNorm(d, 1e-5)
        self.up_conv = _Conv1d(d, 2 * inner, 1)
        self.depth_conv = _DepthwiseConv(inner, config.conv_kernel_size)
        self.batch_norm = BatchNorm(inner)
        self.down_conv = _Conv1d(inner, d, 1)

    def forward(self, op, x):
        h = self.up_conv(op, op.Transpose(self.norm(op, x), perm=[0, 2, 1]))
        a, gate = op.Split(h, num_outputs=2, axis=1, _outputs=2)
        h = self.batch_norm(op, self.depth_conv(op, op.Mul(a, op.Sigmoid(gate))))
        h = self.down_conv(op, op.Mul(h, op.Sigmoid(h)))
        return op.Transpose(h, perm=[0, 2, 1])


class ConformerBlock(nn.Module):
    def __init__(self, config: GraniteSpeechEncoderConfig) -> None:
        super().__init__()
        self.ff1 = FeedForward(config)
        self.attn = BlockAttention(config)
        self.conv = ConvModule(config)
        self.ff2 = FeedForward(config)
        self.post_norm = LayerNorm(config.hidden_dim, 1e-5)

    def forward(self, op, x):
        x = op.Add(op.Mul(self.ff1(op, x), 0.5), x)
        x = op.Add(self.attn(op, x), x)
        x = op.Add(self.conv(op, x), x)
        x = op.Add(op.Mul(self.ff2(op, x), 0.5), x)
        return self.post_norm(op, x)


class GraniteSpeechCTCEncoder(nn.Module):
    """``input_linear``, ``layers``, the mid-layer ``out``/``out_mid`` residual (module docstring)."""

    def __init__(self, config: GraniteSpeechEncoderConfig) -> None:
        super().__init__()
        d = config.hidden_dim
        self.input_linear = Linear(config.input_dim, d, bias=True)
        self.layers = nn.ModuleList([ConformerBlock(config) for _ in range(config.num_layers)])
        self.out = Linear(d, config.output_dim, bias=True)
        self.out_mid = Linear(config.output_dim, d, bias=True)

    def forward(self, op, input_features):
        """``[batch, frames, input_dim]`` -> ``[batch, frames, hidden_dim]``."""
        x = self.input_linear(op, input_features)
        middle = len(self.layers) // 2
        for index, layer in enumerate(self.layers, start=1):
            x = layer(op, x)
            if index == middle:
                ctc = op.Softmax(self.out(op, x), axis=-1)
                x = op.Add(x, self.out_mid(op, ctc))
        return x
