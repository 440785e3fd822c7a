"""SEW-D: SEW with a DeBERTa-v2 transformer on the squeezed frames.

The squeezing, the position conv and the upsampling are SEW's; the transformer is
DeBERTa-v2's disentangled attention: scores ``(q·k + c2p + p2c) / sqrt(dim * (1 +
len(pos_att_type)))`` where c2p is the query against the projected relative-distance
embedding of ``i - j`` and p2c the key against that of ``j - i`` (projected by
``pos_key_proj``/``pos_query_proj`` or, with ``share_att_key``, by ``key_proj``/
``query_proj``); distances beyond ``position_buckets // 2`` fall into log-spaced
buckets, and the relative table may be layer-normalised (``norm_rel_ebd``). Padded
pooled frames are masked as keys only (transformers' ``XSoftmax`` over a
``[batch, 1, 1, frames]`` mask), and there is no LayerNorm before the first layer.

The attention mirrors ``mobius_text.models.deberta_v2``, which this package cannot
import (it depends on mobius-core only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation, lowest_value
from mobius.errors import ConfigError
from mobius_audio.models.sew import (
    SEWConfig,
    SEWForCTC,
    SEWModel,
    SEWPositionalConvEmbedding,
    SEWUpsampling,
    squeeze,
)

FLOAT = ir.DataType.FLOAT


@dataclass
class SEWDConfig(SEWConfig):
    relative_attention: bool = True
    max_relative_positions: int = 512  # max_position_embeddings unless set
    position_buckets: int = 256  # > 0: log-bucketed distances, a table of 2 * position_buckets
    share_att_key: bool = True
    pos_att_type: tuple[str, ...] = ("p2c", "c2p")
    norm_rel_ebd: tuple[str, ...] = ("layer_norm",)

    @property
    def span(self) -> int:
        """Half the rows of the relative table: the distances told apart."""
        return self.position_buckets if self.position_buckets > 0 else self.max_relative_positions

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if (getattr(hf_config, "conv_kernel_size", 0) or 0) > 0:
            raise ConfigError(
                "the SEW-D convolution after the first layer (conv_kernel_size) is not built"
            )
        heads, hidden = hf_config.num_attention_heads, hf_config.hidden_size
        head_size = getattr(hf_config, "attention_head_size", None)
        if head_size is not None and head_size * heads != hidden:
            raise ConfigError(f"attention_head_size {head_size} * heads {heads} != {hidden}")
        fields = super().hf_fields(hf_config)
        kinds = getattr(hf_config, "pos_att_type", None) or ()
        if isinstance(kinds, str):
            kinds = [k.strip() for k in kinds.lower().split("|")]
        max_relative = getattr(hf_config, "max_relative_positions", -1) or -1
        norms = getattr(hf_config, "norm_rel_ebd", "none") or "none"
        return dict(
            fields,
            feature_layer_norm_eps=hf_config.feature_layer_norm_eps,
            relative_attention=bool(getattr(hf_config, "relative_attention", False)),
            max_relative_positions=(
                max_relative if max_relative >= 1 else hf_config.max_position_embeddings
            ),
            position_buckets=getattr(hf_config, "position_buckets", -1),
            share_att_key=bool(getattr(hf_config, "share_att_key", False)),
            pos_att_type=tuple(kinds),
            norm_rel_ebd=tuple(x.strip() for x in norms.lower().split("|")),
        )


def float_constant(op, value: float, like):
    return op.CastLike(op.Constant(value=ir.tensor(np.array(value, np.float32))), like)


def relative_positions(op, x):
    """``[n, n]`` int64 ``i - j`` for query ``i`` and key ``j`` over the frames of ``x [b, n, d]``."""
    ids = op.Range(0, op.Squeeze(op.Shape(x, start=1, end=2), [0]), 1)
    return op.Sub(op.Unsqueeze(ids, [1]), op.Unsqueeze(ids, [0]))


def log_bucket_positions(op, rel_pos, bucket_size: int, max_position: int):
    """transformers' ``make_log_bucket_position`` in float32 as there: exact within ``±mid``, log-spaced beyond."""
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


def split_heads(op, x, num_heads: int):
    """``[batch, seq, heads*dim]`` -> ``[batch, heads, seq, dim]``."""
    return op.Transpose(op.Reshape(x, [0, 0, num_heads, -1]), perm=[0, 2, 1, 3])


def positions_as_keys(op, projected, num_heads: int):
    """Projected relative embeddings ``[2*span, heads*dim]`` -> ``[heads, dim, 2*span]``."""
    return op.Transpose(op.Reshape(projected, [0, num_heads, -1]), perm=[1, 2, 0])


def gather_by_distance(op, scores, index):
    """``scores [b, h, n, 2*span]`` picked at ``index [n, n]`` -> ``[b, h, n, n]``."""
    shape = op.Concat(op.Shape(scores, start=0, end=3), op.Shape(scores, start=2, end=3), axis=0)
    return op.GatherElements(scores, op.Expand(index, shape), axis=3)


class DisentangledSelfAttention(nn.Module):
    """DeBERTa-v2 attention over a fixed span of the relative table; pads masked as keys."""

    def __init__(self, config: SEWDConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.query_proj, self.key_proj = Linear(d, d, True), Linear(d, d, True)
        self.value_proj = Linear(d, d, True)
        self.kinds = config.pos_att_type if config.relative_attention else ()
        own = config.relative_attention and not config.share_att_key
        self.pos_key_proj = Linear(d, d, True) if own and "c2p" in self.kinds else None
        self.pos_query_proj = Linear(d, d, True) if own and "p2c" in self.kinds else None
        self.share_att_key, self.span = config.share_att_key, config.span
        self.num_heads = config.num_attention_heads
        scale_factor = 1 + sum(kind in config.pos_att_type for kind in ("c2p", "p2c"))
        self.scale = float(np.sqrt(np.float32(d // self.num_heads * scale_factor)))

    def forward(self, op, x, key_mask, rel_pos, rel_embeddings):
        heads = self.num_heads
        q = split_heads(op, self.query_proj(op, x), heads)  # [b, h, n, d]
        k = split_heads(op, self.key_proj(op, x), heads)
        v = split_heads(op, self.value_proj(op, x), heads)
        scale = float_constant(op, self.scale, q)
        scores = op.MatMul(q, op.Div(op.Transpose(k, perm=[0, 1, 3, 2]), scale))  # [b, h, n, n]
        if self.kinds:
            scores = op.Add(scores, self.relative_scores(op, q, k, rel_pos, rel_embeddings, scale))
        lowest = float_constant(op, lowest_value(scores.dtype or FLOAT), scores)
        probs = op.Softmax(op.Where(key_mask, scores, lowest), axis=-1)
        context = op.Transpose(op.MatMul(probs, v), perm=[0, 2, 1, 3])  # [b, n, h, d]
        return op.Reshape(context, [0, 0, -1])

    def relative_scores(self, op, q, k, rel_pos, rel_embeddings, scale):
        """c2p + p2c: distances shifted by ``span`` and clipped to the table's ``2 * span`` rows."""
        span = self.span
        window = op.Slice(rel_embeddings, [0], [2 * span], [0])  # [2*span, hidden]
        key_proj = self.key_proj if self.share_att_key else self.pos_key_proj
        query_proj = self.query_proj if self.share_att_key else self.pos_query_proj
        zero, top = op.Constant(value_int=0), op.Constant(value_int=2 * span - 1)
        score = None
        if "c2p" in self.kinds:
            pos_key = positions_as_keys(op, key_proj(op, window), self.num_heads)
            index = op.Clip(op.Add(rel_pos, op.Constant(value_int=span)), zero, top)
            score = op.Div(gather_by_distance(op, op.MatMul(q, pos_key), index), scale)
        if "p2c" in self.kinds:
            pos_query = positions_as_keys(op, query_proj(op, window), self.num_heads)
            index = op.Clip(op.Sub(op.Constant(value_int=span), rel_pos), zero, top)
            p2c = gather_by_distance(op, op.MatMul(k, pos_query), index)  # [b, h, key, query]
            p2c = op.Div(op.Transpose(p2c, perm=[0, 1, 3, 2]), scale)
            score = p2c if score is None else op.Add(score, p2c)
        return score


class SEWDResidualOutput(nn.Module):
    """``LayerNorm(dense(x) + residual)``."""

    def __init__(self, cin: int, cout: int, eps: float) -> None:
        super().__init__()
        self.dense = Linear(cin, cout, bias=True)
        self.LayerNorm = LayerNorm(cout, eps)

    def forward(self, op, x, residual):
        return self.LayerNorm(op, op.Add(self.dense(op, x), residual))


class SEWDAttention(nn.Module):
    def __init__(self, config: SEWDConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.self = DisentangledSelfAttention(config)
        self.output = SEWDResidualOutput(d, d, config.layer_norm_eps)

    def forward(self, op, x, key_mask, rel_pos, rel_embeddings):
        return self.output(op, self.self(op, x, key_mask, rel_pos, rel_embeddings), x)


class SEWDIntermediate(nn.Module):
    def __init__(self, config: SEWDConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.intermediate_size, bias=True)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        return self.act(op, self.dense(op, x))


class SEWDLayer(nn.Module):
    def __init__(self, config: SEWDConfig) -> None:
        super().__init__()
        self.attention = SEWDAttention(config)
        self.intermediate = SEWDIntermediate(config)
        self.output = SEWDResidualOutput(
            config.intermediate_size, config.hidden_size, config.layer_norm_eps
        )

    def forward(self, op, x, key_mask, rel_pos, rel_embeddings):
        x = self.attention(op, x, key_mask, rel_pos, rel_embeddings)
        return self.output(op, self.intermediate(op, x), x)


class RelativeEmbeddings(nn.Module):
    """The table of relative-distance embeddings ``[2 * span, hidden]``, read whole."""

    def __init__(self, rows: int, hidden: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([rows, hidden])

    def forward(self, op):
        return self.weight


class SEWDTransformerEncoder(nn.Module):
    """``layer.*`` with the (optionally normalised) relative table and distances they share."""

    def __init__(self, config: SEWDConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.layer = nn.ModuleList([SEWDLayer(config) for _ in range(config.num_hidden_layers)])
        self.rel_embeddings = self.LayerNorm = None
        if config.relative_attention:
            self.rel_embeddings = RelativeEmbeddings(2 * config.span, d)
            if "layer_norm" in config.norm_rel_ebd:
                self.LayerNorm = LayerNorm(d, config.layer_norm_eps)
        self.buckets = (config.position_buckets, config.max_relative_positions)

    def forward(self, op, x, mask):
        """``x`` [b, n, hidden], ``mask`` bool [b, n]; the output and the layer states."""
        key_mask = op.Unsqueeze(mask, [1, 2])  # [b, 1, 1, n]
        rel_pos = table = None
        if self.rel_embeddings is not None:
            rel_pos = relative_positions(op, x)
            if self.buckets[0] > 0 and self.buckets[1] > 0:
                rel_pos = log_bucket_positions(op, rel_pos, *self.buckets)
            table = self.rel_embeddings(op)
            if self.LayerNorm is not None:
                table = self.LayerNorm(op, table)
        states = [x]
        for layer in self.layer:
            x = layer(op, x, key_mask, rel_pos, table)
            states.append(x)
        return x, states


class SEWDEncoder(nn.Module):
    """SEW's squeeze and upsampling around the DeBERTa-v2 transformer ``encoder``."""

    def __init__(self, config: SEWDConfig) -> None:
        super().__init__()
        self.pos_conv_embed = SEWPositionalConvEmbedding(config)
        self.encoder = SEWDTransformerEncoder(config)
        self.upsample = SEWUpsampling(config)
        self.factor = config.squeeze_factor

    def forward(self, op, x, frame_mask):
        frames = op.Shape(x, start=1, end=2)
        x, mask = squeeze(op, x, frame_mask, self.pos_conv_embed, self.factor)
        x, states = self.encoder(op, x, mask)
        return self.upsample(op, x, frames), states


class SEWDModel(SEWModel):
    encoder_class = SEWDEncoder


class SEWDForCTC(SEWForCTC):
    config_class = SEWDConfig
    base_model_prefix = "sew_d"
    model_class = SEWDModel

    @property
    def ignored_weights(self) -> tuple[str, ...]:
        ignored = super().ignored_weights
        if not self.config.relative_attention and "layer_norm" in self.config.norm_rel_ebd:
            ignored += (
                "sew_d.encoder.encoder.LayerNorm.*",
            )  # made, unused without relative attention
        return ignored


MODEL_TYPES = {"sew-d": SEWDForCTC}
