"""LiLT: RoBERTa's text stream beside a narrow layout stream over each token's box (``bbox``).

The graph takes ``bbox`` int64 [batch, sequence, 4] (x0, y0, x1, y1 in
``0..max_2d_position_embeddings-1``) after the text contract's inputs. The layout stream
embeds the box's corners, height and width (``hidden // 6`` each, concatenated and
projected to ``hidden // channel_shrink_ratio``) plus its own position embeddings at
RoBERTa's positions. Each layer's two streams share one attention map: the text and
layout scores, each scaled by its head width, are summed ("bidirectional attention
complementation") and weigh both streams' values; each stream keeps its own residual
blocks and feed-forward. Without boxes transformers reads zeros, and so does
``mobius embed``. Heads: ``classifier`` (RoBERTa's, on the first token), token
classification and ``qa_outputs``; transformers has no masked-LM or multiple-choice head.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    LayerNorm,
    Linear,
    merge_heads,
    padding_bias,
    split_heads,
)
from mobius.errors import ConfigError
from mobius_text.models.bert import BertIntermediate, BertResidualOutput
from mobius_text.models.roberta import (
    RobertaConfig,
    RobertaEmbeddings,
    RobertaForFeatureExtraction,
)


@dataclass
class LiltConfig(RobertaConfig):
    channel_shrink_ratio: int = 4
    max_2d_position_embeddings: int = 1024

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        ratio, hidden = hf_config.channel_shrink_ratio, hf_config.hidden_size
        if hidden % 6 or hidden % ratio or (hidden // hf_config.num_attention_heads) % ratio:
            raise ConfigError(
                "LiLT needs hidden_size divisible by 6 and the head size by channel_shrink_ratio"
            )
        fields["channel_shrink_ratio"] = ratio
        fields["max_2d_position_embeddings"] = hf_config.max_2d_position_embeddings
        return fields

    @property
    def layout_size(self) -> int:
        """The layout stream's width, ``hidden_size // channel_shrink_ratio``."""
        return self.hidden_size // self.channel_shrink_ratio


class LiltLayoutEmbeddings(nn.Module):
    """``LayerNorm(box_linear(concat(x0, y0, x1, y1, h, w embeddings)) + box_position(pos))``."""

    def __init__(self, config: LiltConfig) -> None:
        super().__init__()
        size, part = config.max_2d_position_embeddings, config.hidden_size // 6
        self.x_position_embeddings = Embedding(size, part)
        self.y_position_embeddings = Embedding(size, part)
        self.h_position_embeddings = Embedding(size, part)
        self.w_position_embeddings = Embedding(size, part)
        width = config.layout_size
        self.box_position_embeddings = Embedding(config.max_position_embeddings, width)
        self.box_linear_embeddings = Linear(config.hidden_size, width, bias=True)
        self.LayerNorm = LayerNorm(width, config.layer_norm_eps)

    def forward(self, op, bbox, position_ids):
        x0, y0, x1, y1 = op.Split(bbox, num_outputs=4, axis=-1, _outputs=4)  # [batch, seq, 1]
        parts = [
            self.x_position_embeddings(op, x0),
            self.y_position_embeddings(op, y0),
            self.x_position_embeddings(op, x1),
            self.y_position_embeddings(op, y1),
            self.h_position_embeddings(op, op.Sub(y1, y0)),
            self.w_position_embeddings(op, op.Sub(x1, x0)),
        ]  # each [batch, seq, 1, hidden // 6]
        spatial = op.Squeeze(op.Concat(*parts, axis=-1), [2])  # [batch, seq, hidden]
        x = op.Add(
            self.box_linear_embeddings(op, spatial),
            self.box_position_embeddings(op, position_ids),
        )  # [batch, seq, layout]
        return self.LayerNorm(op, x)


class LiltSelfAttention(nn.Module):
    """One attention map from the summed text and layout scores, applied to both streams' values."""

    def __init__(self, config: LiltConfig) -> None:
        super().__init__()
        hidden, layout = config.hidden_size, config.layout_size
        self.query = Linear(hidden, hidden, bias=True)
        self.key = Linear(hidden, hidden, bias=True)
        self.value = Linear(hidden, hidden, bias=True)
        self.layout_query = Linear(layout, layout, bias=True)
        self.layout_key = Linear(layout, layout, bias=True)
        self.layout_value = Linear(layout, layout, bias=True)
        self.num_heads = config.num_attention_heads
        self.head_dim = hidden // self.num_heads
        self.layout_head_dim = self.head_dim // config.channel_shrink_ratio

    def scores(self, op, q_proj, k_proj, x, head_dim: int):
        """``(q k^T) / sqrt(head_dim)``, ``[batch, heads, seq, seq]``."""
        q = split_heads(op, q_proj(op, x), self.num_heads, head_dim)
        k = split_heads(op, k_proj(op, x), self.num_heads, head_dim)
        return op.Mul(op.MatMul(q, op.Transpose(k, perm=[0, 1, 3, 2])), head_dim**-0.5)

    def forward(self, op, x, layout, bias):
        text_scores = self.scores(op, self.query, self.key, x, self.head_dim)
        layout_scores = self.scores(
            op, self.layout_query, self.layout_key, layout, self.layout_head_dim
        )
        probs = op.Softmax(op.Add(op.Add(text_scores, layout_scores), bias), axis=-1)
        v = split_heads(op, self.value(op, x), self.num_heads, self.head_dim)
        layout_v = split_heads(
            op, self.layout_value(op, layout), self.num_heads, self.layout_head_dim
        )
        return merge_heads(op, op.MatMul(probs, v)), merge_heads(op, op.MatMul(probs, layout_v))


class LiltAttention(nn.Module):
    """The shared attention, then each stream's post-norm residual (``output``, ``layout_output``)."""

    def __init__(self, config: LiltConfig) -> None:
        super().__init__()
        hidden, layout, eps = config.hidden_size, config.layout_size, config.layer_norm_eps
        self.self = LiltSelfAttention(config)
        self.output = BertResidualOutput(hidden, hidden, eps)
        self.layout_output = BertResidualOutput(layout, layout, eps)

    def forward(self, op, x, layout, bias):
        text_context, layout_context = self.self(op, x, layout, bias)
        return self.output(op, text_context, x), self.layout_output(op, layout_context, layout)


class LiltLayer(nn.Module):
    """BERT's layer on the text stream and a narrower one on the layout stream, attention shared."""

    def __init__(self, config: LiltConfig) -> None:
        super().__init__()
        hidden, inner, act = config.hidden_size, config.intermediate_size, config.hidden_act
        layout, ratio, eps = config.layout_size, config.channel_shrink_ratio, config.layer_norm_eps
        self.attention = LiltAttention(config)
        self.intermediate = BertIntermediate(hidden, inner, act)
        self.output = BertResidualOutput(inner, hidden, eps)
        self.layout_intermediate = BertIntermediate(layout, inner // ratio, act)
        self.layout_output = BertResidualOutput(inner // ratio, layout, eps)

    def forward(self, op, x, layout, bias):
        x, layout = self.attention(op, x, layout, bias)
        x = self.output(op, self.intermediate(op, x), x)
        layout = self.layout_output(op, self.layout_intermediate(op, layout), layout)
        return x, layout


class LiltEncoder(nn.Module):
    def __init__(self, config: LiltConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList([LiltLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, op, x, layout, bias):
        for layer in self.layer:
            x, layout = layer(op, x, layout, bias)
        return x


class LiltModel(nn.Module):
    """RoBERTa's embeddings, the layout embeddings and the two-stream encoder (no head reads
    ``pooler``)."""

    def __init__(self, config: LiltConfig) -> None:
        super().__init__()
        self.embeddings = RobertaEmbeddings(config)
        self.layout_embeddings = LiltLayoutEmbeddings(config)
        self.encoder = LiltEncoder(config)
        self.pooler = None  # only LiltModel checkpoints hold it; its output is not built

    def forward(self, op, input_ids, attention_mask, token_type_ids, bbox):
        position_ids = self.embeddings.position_ids(op, input_ids)  # [batch, seq]
        x = self.embeddings(op, input_ids, token_type_ids, position_ids)  # [batch, seq, hidden]
        layout = self.layout_embeddings(op, bbox, position_ids)  # [batch, seq, layout]
        return self.encoder(op, x, layout, padding_bias(op, attention_mask, x.dtype))


class LiltForFeatureExtraction(RobertaForFeatureExtraction):
    """LiLT's encoder under ``lilt.*`` with ``classifier`` or ``qa_outputs``."""

    config_class = LiltConfig
    base_model_prefix = "lilt"
    model_class = LiltModel
    head_names = ("classifier", "qa_outputs")
    tied_copies = untied_unused = ()
    zeros_when_absent = ("bbox",)  # transformers' LiltModel reads zeros without boxes

    def __init__(self, config: LiltConfig) -> None:
        if config.head in ("masked-lm", "multiple-choice"):
            raise ConfigError(f"--head {config.head} is not built for lilt: transformers has none")
        super().__init__(config)

    def extra_inputs(self) -> dict[str, tuple[ir.DataType, list]]:
        return {"bbox": (ir.DataType.INT64, ["batch", "sequence", 4])}

    def forward(self, op, input_ids, attention_mask, token_type_ids, bbox):
        hidden = self.base_model(op, input_ids, attention_mask, token_type_ids, bbox)
        outputs = {"last_hidden_state": hidden}
        head = self.classifier if self.classifier is not None else self.qa_outputs
        if head is not None:
            outputs["logits"] = head(op, hidden)
        return outputs


MODEL_TYPES = {"lilt": LiltForFeatureExtraction}
