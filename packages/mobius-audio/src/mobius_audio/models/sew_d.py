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

The attention is :class:`mobius.components.DisentangledSelfAttention`, the one
DeBERTa-v2 builds on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import (
    DisentangledSelfAttention,
    LayerNorm,
    Linear,
    RelativeEmbeddings,
    get_activation,
    log_bucket_positions,
    relative_positions,
    sequence_length,
)
from mobius.errors import ConfigError
from mobius_audio.models.sew import (
    SEWConfig,
    SEWForCTC,
    SEWModel,
    SEWPositionalConvEmbedding,
    SEWUpsampling,
    squeeze,
)


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
        self.self = DisentangledSelfAttention(
            d,
            config.num_attention_heads,
            d // config.num_attention_heads,
            relative_attention=config.relative_attention,
            pos_att_type=config.pos_att_type,
            span=config.span,
            share_att_key=config.share_att_key,
        )
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
            rel_pos = relative_positions(op, sequence_length(op, x))
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
    def ignored(self) -> tuple[str, ...]:
        ignored = super().ignored
        if not self.config.relative_attention and "layer_norm" in self.config.norm_rel_ebd:
            ignored += (
                "sew_d.encoder.encoder.LayerNorm.*",
            )  # made, unused without relative attention
        return ignored


MODEL_TYPES = {"sew-d": SEWDForCTC}
