"""DeBERTa-v2/v3: DeBERTa with log-bucketed distances, separate (or shared) projections.

What changes from :mod:`mobius_text.models.deberta`: q/k/v have their own biased
projections (``query_proj``...); positions are projected by ``pos_key_proj`` /
``pos_query_proj`` or, with ``share_att_key``, by the content ``key_proj`` /
``query_proj``; distances beyond ``position_buckets // 2`` fall into log-spaced
buckets; the relative table may be layer-normalised (``norm_rel_ebd``); and a
convolution may follow the first layer (``conv_kernel_size``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation
from mobius_text.models.deberta import (
    DebertaAttention,
    DebertaConfig,
    DebertaEncoder,
    DebertaForFeatureExtraction,
    DebertaLayer,
    DebertaModel,
    float_constant,
    gather_by_distance,
    masked_softmax_attention,
    positions_as_keys,
    relative_positions,
    sequence_length,
    split_heads,
)

FLOAT = ir.DataType.FLOAT


@dataclass
class DebertaV2Config(DebertaConfig):
    attention_head_size: int = 0  # 0: hidden_size // num_attention_heads
    position_buckets: int = -1  # > 0: log-bucketed distances, a table of 2 * position_buckets
    share_att_key: bool = False
    norm_rel_ebd: tuple[str, ...] = ()  # "layer_norm": the relative table is normalised
    conv_kernel_size: int = 0
    conv_groups: int = 1
    conv_act: str = "tanh"

    @property
    def head_dim(self) -> int:
        return self.attention_head_size or self.hidden_size // self.num_attention_heads

    @property
    def span(self) -> int:
        """Half the rows of the relative table: the distances told apart."""
        return self.position_buckets if self.position_buckets > 0 else self.max_relative_positions

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        norms = getattr(hf_config, "norm_rel_ebd", "none") or "none"
        fields.update(
            attention_head_size=getattr(hf_config, "attention_head_size", 0) or 0,
            position_buckets=getattr(hf_config, "position_buckets", -1),
            share_att_key=bool(getattr(hf_config, "share_att_key", False)),
            norm_rel_ebd=tuple(x.strip() for x in norms.lower().split("|")),
            conv_kernel_size=getattr(hf_config, "conv_kernel_size", 0) or 0,
            conv_groups=getattr(hf_config, "conv_groups", 1),
            conv_act=getattr(hf_config, "conv_act", "tanh"),
        )
        return fields


def log_bucket_positions(op, rel_pos, bucket_size: int, max_position: int):
    """transformers' ``make_log_bucket_position``, in float32 as there: exact within ``±mid``, log-spaced beyond."""
    mid = bucket_size // 2
    ints = lambda v: op.Constant(value=ir.tensor(np.array(v, np.int64)))  # noqa: E731
    floats = lambda v: op.Constant(value=ir.tensor(np.array(v, np.float32)))  # noqa: E731
    near = op.And(op.Less(rel_pos, ints(mid)), op.Greater(rel_pos, ints(-mid)))
    abs_pos = op.Where(near, ints(mid - 1), op.Abs(rel_pos))
    ratio = op.Div(
        op.Log(op.Div(op.Cast(abs_pos, to=FLOAT), floats(mid))),
        floats(np.log(np.float32((max_position - 1) / mid))),
    )
    log_pos = op.Add(op.Ceil(op.Mul(ratio, floats(mid - 1))), floats(mid))
    signed = op.Mul(log_pos, op.Cast(op.Sign(rel_pos), to=FLOAT))
    bucket = op.Where(op.LessOrEqual(abs_pos, ints(mid)), op.Cast(rel_pos, to=FLOAT), signed)
    return op.Cast(bucket, to=ir.DataType.INT64)


class DebertaV2SelfAttention(nn.Module):
    """``(q·k + c2p + p2c) / sqrt(dim * (1 + c2p + p2c))``, over a fixed span of the relative table."""

    def __init__(self, config: DebertaV2Config) -> None:
        super().__init__()
        hidden, width = config.hidden_size, config.num_attention_heads * config.head_dim
        self.query_proj = Linear(hidden, width, bias=True)
        self.key_proj = Linear(hidden, width, bias=True)
        self.value_proj = Linear(hidden, width, bias=True)
        self.kinds = config.pos_att_type if config.relative_attention else ()
        own = config.relative_attention and not config.share_att_key
        self.pos_key_proj = Linear(hidden, width, True) if own and "c2p" in self.kinds else None
        self.pos_query_proj = Linear(hidden, width, True) if own and "p2c" in self.kinds else None
        self.share_att_key, self.span = config.share_att_key, config.span
        self.heads = (config.num_attention_heads, config.head_dim)
        scale_factor = 1 + sum(kind in config.pos_att_type for kind in ("c2p", "p2c"))
        self.scale = float(np.sqrt(np.float32(config.head_dim * scale_factor)))
        self.relative = config.relative_attention

    def forward(self, op, x, pair_mask, rel_pos, rel_embeddings):
        heads = self.heads[0]
        q = split_heads(op, self.query_proj(op, x), heads)  # [b, h, n, d]
        k = split_heads(op, self.key_proj(op, x), heads)
        v = split_heads(op, self.value_proj(op, x), heads)
        scale = float_constant(op, self.scale, q)
        scores = op.MatMul(q, op.Div(op.Transpose(k, perm=[0, 1, 3, 2]), scale))
        if self.relative and self.kinds:
            scores = op.Add(scores, self.relative_scores(op, q, k, rel_pos, rel_embeddings, scale))
        return masked_softmax_attention(op, scores, pair_mask, v)

    def relative_scores(self, op, q, k, rel_pos, rel_embeddings, scale):
        span = self.span
        window = op.Slice(rel_embeddings, [0], [2 * span], [0])  # [2*span, hidden]
        key_proj = self.key_proj if self.share_att_key else self.pos_key_proj
        query_proj = self.query_proj if self.share_att_key else self.pos_query_proj
        zero, top = op.Constant(value_int=0), op.Constant(value_int=2 * span - 1)
        score = None
        if "c2p" in self.kinds:
            pos_key = positions_as_keys(op, key_proj(op, window), *self.heads)
            index = op.Clip(op.Add(rel_pos, op.Constant(value_int=span)), zero, top)
            score = op.Div(gather_by_distance(op, op.MatMul(q, pos_key), index, q), scale)
        if "p2c" in self.kinds:
            pos_query = positions_as_keys(op, query_proj(op, window), *self.heads)
            index = op.Clip(op.Sub(op.Constant(value_int=span), rel_pos), zero, top)
            p2c = gather_by_distance(op, op.MatMul(k, pos_query), index, k)  # [b, h, key, query]
            p2c = op.Div(op.Transpose(p2c, perm=[0, 1, 3, 2]), scale)
            score = p2c if score is None else op.Add(score, p2c)
        return score


class DebertaV2Attention(DebertaAttention):
    attention_class = DebertaV2SelfAttention


class DebertaV2Layer(DebertaLayer):
    attention_class = DebertaV2Attention


class Conv1d(nn.Module):
    """``torch.nn.Conv1d`` over ``[batch, channels, seq]``, padded ``(kernel - 1) // 2`` both sides."""

    def __init__(self, channels: int, kernel_size: int, groups: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([channels, channels // groups, kernel_size])
        self.bias = nn.Parameter([channels])
        self.kernel_size, self.groups = kernel_size, groups

    def forward(self, op, x):
        pad = (self.kernel_size - 1) // 2
        return op.Conv(
            x,
            self.weight,
            self.bias,
            kernel_shape=[self.kernel_size],
            pads=[pad, pad],
            group=self.groups,
        )


class ConvLayer(nn.Module):
    """``LayerNorm(residual + act(conv(embeddings), pads zeroed))``, pads zeroed again."""

    def __init__(self, config: DebertaV2Config) -> None:
        super().__init__()
        self.conv = Conv1d(config.hidden_size, config.conv_kernel_size, config.conv_groups)
        self.act = get_activation(config.conv_act)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, embeddings, residual, token_mask):
        out = op.Transpose(self.conv(op, op.Transpose(embeddings, perm=[0, 2, 1])), perm=[0, 2, 1])
        real = op.Cast(token_mask, to=ir.DataType.BOOL)  # [b, n, 1]
        out = self.act(op, op.Where(real, out, float_constant(op, 0.0, out)))
        out = self.LayerNorm(op, op.Add(residual, out))
        return op.Mul(out, op.CastLike(token_mask, out))


class DebertaV2Encoder(DebertaEncoder):
    layer_class = DebertaV2Layer

    def __init__(self, config: DebertaV2Config) -> None:
        super().__init__(config)
        self.buckets = (config.position_buckets, config.max_relative_positions)
        normed = config.relative_attention and "layer_norm" in config.norm_rel_ebd
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps) if normed else None
        self.conv = ConvLayer(config) if config.conv_kernel_size > 0 else None

    @staticmethod
    def relative_table_size(config: DebertaV2Config) -> int:
        return 2 * config.span

    def relative_inputs(self, op, x):
        if self.rel_embeddings is None:
            return None, None
        rel_pos = relative_positions(op, sequence_length(op, x))
        if self.buckets[0] > 0 and self.buckets[1] > 0:
            rel_pos = log_bucket_positions(op, rel_pos, *self.buckets)
        table = self.rel_embeddings(op)
        return rel_pos, table if self.LayerNorm is None else self.LayerNorm(op, table)

    def forward(self, op, x, pair_mask, token_mask):
        rel_pos, rel_embeddings = self.relative_inputs(op, x)
        embeddings = x
        for i, layer in enumerate(self.layer):
            x = layer(op, x, pair_mask, rel_pos, rel_embeddings)
            if i == 0 and self.conv is not None:
                x = self.conv(op, embeddings, x, token_mask)
        return x


class DebertaV2Model(DebertaModel):
    encoder_class = DebertaV2Encoder


class DebertaV2ForFeatureExtraction(DebertaForFeatureExtraction):
    """The DeBERTa-v2 encoder and the head its config names."""

    config_class = DebertaV2Config
    model_class = DebertaV2Model
    unused_heads = ("mask_predictions.*",)  # the replaced-token-detection head of v3 checkpoints

    @property
    def ignored_weights(self) -> tuple[str, ...]:
        ignored = super().ignored_weights
        if self.deberta.encoder.LayerNorm is None and "layer_norm" in self.config.norm_rel_ebd:
            ignored += (
                "deberta.encoder.LayerNorm.*",
            )  # made, but unused, without relative attention
        return ignored


MODEL_TYPES = {"deberta-v2": DebertaV2ForFeatureExtraction}
