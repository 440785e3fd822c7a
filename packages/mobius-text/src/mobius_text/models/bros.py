"""BROS: BERT whose attention adds a score from each pair of tokens' relative box positions.

The graph takes ``bbox`` float [batch, sequence, 4] (x0, y0, x1, y1, normalised to
0..1: transformers divides by the page size) after the text contract's inputs; transformers
raises without it, so it is required. Boxes become their four corners (8 values),
scaled by ``bbox_scale``; each pair's difference ``bbox[j] - bbox[i]`` is embedded
with sinusoids (``dim_bbox_sinusoid_emb_1d`` per value) and projected to one head's
width (``bbox_projection``), shared by every layer. Each layer's self-attention adds
``q_i . box(i, j)`` to ``q_i . k_j`` before the scaling. Heads: token classification
(``classifier``); transformers' SPADE heads (entity extraction and linking) output
relation scores outside the feature-extraction contract and are not built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, merge_heads, padding_bias, split_heads
from mobius.errors import ConfigError
from mobius_text.models.bert import (
    BertAttention,
    BertConfig,
    BertEncoder,
    BertForFeatureExtraction,
    BertLayer,
    BertModel,
    BertSelfAttention,
)

# A box's 8 values (four corners) from its 4 (x0, y0, x1, y1), as transformers expands them.
CORNERS = [0, 1, 2, 1, 2, 3, 0, 3]


@dataclass
class BrosConfig(BertConfig):
    bbox_scale: float = 100.0

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if hf_config.dim_bbox != len(CORNERS):
            raise ConfigError(f"BROS with dim_bbox={hf_config.dim_bbox} is not built; only 8")
        if hf_config.dim_bbox_sinusoid_emb_1d % 2 or hf_config.hidden_size % 4:
            raise ConfigError("BROS needs hidden_size // 4 // dim_bbox even")
        if getattr(hf_config, "is_decoder", False):
            raise ConfigError("BROS with is_decoder=True is not built")
        return {**super().hf_fields(hf_config), "bbox_scale": float(hf_config.bbox_scale)}

    @property
    def box_sinusoid_size(self) -> int:
        """Sinusoid channels per box value: ``hidden // 4 // 8``."""
        return self.hidden_size // 4 // len(CORNERS)


class BrosPositionalEmbedding1D(nn.Module):
    """The sinusoids' frequencies ``inv_freq [width / 2]`` of one axis (a checkpoint buffer)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.inv_freq = nn.Parameter([width // 2])

    def forward(self, op):
        return op.Unsqueeze(self.inv_freq, [0])  # [1, width / 2]


class BrosPositionalEmbedding2D(nn.Module):
    """The x axis's frequencies for x0, x1 (even box values), the y axis's for y0, y1 (odd)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.x_pos_emb = BrosPositionalEmbedding1D(width)
        self.y_pos_emb = BrosPositionalEmbedding1D(width)

    def forward(self, op, pos):
        """``[..., 8 * width]``: ``sin, cos`` of ``pos [..., 8]`` times each value's frequencies."""
        x, y = self.x_pos_emb(op), self.y_pos_emb(op)
        freq = op.Concat(*[x, y] * (len(CORNERS) // 2), axis=0)  # [8, width / 2]
        angles = op.Mul(op.Unsqueeze(pos, [-1]), freq)  # [..., 8, width / 2]
        waves = op.Concat(op.Sin(angles), op.Cos(angles), axis=-1)  # [..., 8, width]
        return op.Reshape(waves, op.Concat(op.Shape(pos, end=-1), [-1], axis=0))


class BrosBboxEmbeddings(nn.Module):
    """``bbox_projection(sinusoids(bbox[j] - bbox[i]))``: ``[batch, seq_i, seq_j, head_dim]``."""

    def __init__(self, config: BrosConfig) -> None:
        super().__init__()
        width = config.box_sinusoid_size
        self.bbox_sinusoid_emb = BrosPositionalEmbedding2D(width)
        self.bbox_projection = Linear(
            width * len(CORNERS), config.hidden_size // config.num_attention_heads, bias=False
        )
        self.scale = config.bbox_scale

    def forward(self, op, bbox, like):
        corners = op.Gather(bbox, op.Constant(value_ints=CORNERS), axis=-1)  # [b, s, 8]
        corners = op.Mul(corners, op.Constant(value_float=self.scale))
        pos = op.Sub(op.Unsqueeze(corners, [1]), op.Unsqueeze(corners, [2]))  # [b, i, j, 8]
        waves = self.bbox_sinusoid_emb(op, pos)  # [b, i, j, 8 * width]
        return self.bbox_projection(op, op.CastLike(waves, like))  # [b, i, j, head_dim]


class BoxedBias:
    """What BROS's layers pass to their self-attention: the padding bias and the box embeddings."""

    def __init__(self, bias, boxes) -> None:
        self.bias, self.boxes = bias, boxes


class BrosSelfAttention(BertSelfAttention):
    """``softmax((q k^T + q . box(i, j)) * scale + bias) v``."""

    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__(hidden_size, num_heads)
        self.head_dim = hidden_size // num_heads

    def forward(self, op, x, bias: BoxedBias):
        q, k, v = (
            split_heads(op, proj(op, x), self.num_heads, self.head_dim)
            for proj in (self.query, self.key, self.value)
        )  # [b, n, s, d]
        scores = op.MatMul(q, op.Transpose(k, perm=[0, 1, 3, 2]))  # [b, n, i, j]
        boxes = op.Transpose(bias.boxes, perm=[0, 1, 3, 2])  # [b, i, d, j]
        box_scores = op.MatMul(op.Transpose(q, perm=[0, 2, 1, 3]), boxes)  # [b, i, n, j]
        scores = op.Add(scores, op.Transpose(box_scores, perm=[0, 2, 1, 3]))
        scores = op.Add(op.Mul(scores, op.Constant(value_float=self.scale)), bias.bias)
        return merge_heads(op, op.MatMul(op.Softmax(scores, axis=-1), v))


class BrosLayer(BertLayer):
    def __init__(self, config: BrosConfig) -> None:
        self_attention = BrosSelfAttention(config.hidden_size, config.num_attention_heads)
        super().__init__(config, BertAttention(config, self_attention))


class BrosEncoder(BertEncoder):
    layer_class = BrosLayer


class BrosModel(BertModel):
    """BERT's embeddings, the pairwise box embeddings (``bbox_embeddings``) and BROS's layers."""

    encoder_class = BrosEncoder

    def __init__(self, config: BrosConfig) -> None:
        super().__init__(config)
        self.bbox_embeddings = BrosBboxEmbeddings(config)

    def forward(self, op, input_ids, attention_mask, token_type_ids, bbox):
        x = self.embeddings(op, input_ids, token_type_ids)  # [batch, seq, hidden]
        bias = BoxedBias(
            padding_bias(op, attention_mask, x.dtype), self.bbox_embeddings(op, bbox, x)
        )
        return self.encoder(op, x, bias), None


class BrosForFeatureExtraction(BertForFeatureExtraction):
    """The BROS encoder under ``bros.*`` and its token classifier."""

    config_class = BrosConfig
    base_model_prefix = "bros"
    model_class = BrosModel

    def __init__(self, config: BrosConfig) -> None:
        if config.head not in ("none", "token-classification"):
            raise ConfigError(
                f"--head {config.head} is not built for bros: transformers has no such model"
            )
        super().__init__(config)

    def extra_inputs(self) -> dict[str, tuple[ir.DataType, list]]:
        return {"bbox": (ir.DataType.FLOAT, ["batch", "sequence", 4])}


MODEL_TYPES = {"bros": BrosForFeatureExtraction}
