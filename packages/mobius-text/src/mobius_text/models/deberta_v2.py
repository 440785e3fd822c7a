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

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    DisentangledSelfAttention,
    LayerNorm,
    Linear,
    float_constant,
    get_activation,
    log_bucket_positions,
    relative_positions,
    sequence_length,
)
from mobius_text.models.deberta import (
    ContextPooler,
    DebertaAttention,
    DebertaConfig,
    DebertaEncoder,
    DebertaForFeatureExtraction,
    DebertaLayer,
    DebertaModel,
)


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


class DebertaV2SelfAttention(DisentangledSelfAttention):
    """``(q·k + c2p + p2c) / sqrt(dim * (1 + c2p + p2c))``, over a fixed span of the relative table."""

    def __init__(self, config: DebertaV2Config) -> None:
        super().__init__(
            config.hidden_size,
            config.num_attention_heads,
            config.head_dim,
            relative_attention=config.relative_attention,
            pos_att_type=config.pos_att_type,
            span=config.span,
            share_att_key=config.share_att_key,
        )


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
    pretraining_heads = ("mask_predictions",)  # the replaced-token detection of v3 checkpoints

    def choice_head(self, config: DebertaV2Config) -> tuple[nn.Module, nn.Module]:
        """The context pooler and one score per choice."""
        return ContextPooler(config), Linear(config.hidden_size, 1, bias=True)

    @property
    def ignored(self) -> tuple[str, ...]:
        ignored = super().ignored
        if self.deberta.encoder.LayerNorm is None and "layer_norm" in self.config.norm_rel_ebd:
            ignored += (
                "deberta.encoder.LayerNorm.*",
            )  # made, but unused, without relative attention
        return ignored


MODEL_TYPES = {"deberta-v2": DebertaV2ForFeatureExtraction}
