"""MarkupLM: BERT with RoBERTa's positions and embeddings of each token's XPath in the page.

The graph takes ``xpath_tags_seq`` and ``xpath_subs_seq`` int64 [batch, sequence,
max_depth] (the tag id and the sibling subscript at each depth of the token's XPath)
after the text contract's inputs. Each depth has its own tag and subscript tables; the
depths' rows are concatenated, tags plus subscripts, and an MLP (``xpath_unitseq2_inner``,
ReLU, ``inner2emb``) adds the result to BERT's embeddings. Without them transformers
fills ``tag_pad_id`` and ``subs_pad_id``, not zeros, so the inputs are required.
Heads: ``classifier`` (on BERT's pooler for sequences, per token otherwise) and
``qa_outputs``; transformers has no masked-LM or multiple-choice model for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, Linear
from mobius.errors import ConfigError
from mobius_text.models.bert import BertForFeatureExtraction, BertModel
from mobius_text.models.roberta import RobertaConfig, RobertaEmbeddings


@dataclass
class MarkupLMConfig(RobertaConfig):
    max_depth: int = 50
    xpath_unit_hidden_size: int = 32
    max_xpath_tag_unit_embeddings: int = 256
    max_xpath_subs_unit_embeddings: int = 1024

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        for name in (
            "max_depth",
            "xpath_unit_hidden_size",
            "max_xpath_tag_unit_embeddings",
            "max_xpath_subs_unit_embeddings",
        ):
            fields[name] = getattr(hf_config, name)
        return fields


class XPathEmbeddings(nn.Module):
    """``inner2emb(relu(xpath_unitseq2_inner(tags + subs)))``, tags and subs each the concatenated
    rows of their per-depth tables."""

    def __init__(self, config: MarkupLMConfig) -> None:
        super().__init__()
        unit, depth, hidden = config.xpath_unit_hidden_size, config.max_depth, config.hidden_size
        self.xpath_unitseq2_inner = Linear(unit * depth, 4 * hidden, bias=True)
        self.inner2emb = Linear(4 * hidden, hidden, bias=True)
        tags, subs = config.max_xpath_tag_unit_embeddings, config.max_xpath_subs_unit_embeddings
        self.xpath_tag_sub_embeddings = nn.ModuleList([Embedding(tags, unit) for _ in range(depth)])
        self.xpath_subs_sub_embeddings = nn.ModuleList(
            [Embedding(subs, unit) for _ in range(depth)]
        )
        self.max_depth = depth

    def per_depth(self, op, tables, ids):
        """``[batch, seq, depth * unit]``: depth ``i``'s table read at ``ids[..., i]``, concatenated."""
        columns = op.Split(ids, num_outputs=self.max_depth, axis=-1, _outputs=self.max_depth)
        if self.max_depth == 1:
            columns = [columns]
        rows = [table(op, column) for table, column in zip(tables, columns, strict=True)]
        return op.Squeeze(op.Concat(*rows, axis=-1), [2])  # each row [batch, seq, 1, unit]

    def forward(self, op, xpath_tags_seq, xpath_subs_seq):
        x = op.Add(
            self.per_depth(op, self.xpath_tag_sub_embeddings, xpath_tags_seq),
            self.per_depth(op, self.xpath_subs_sub_embeddings, xpath_subs_seq),
        )  # [batch, seq, depth * unit]
        return self.inner2emb(op, op.Relu(self.xpath_unitseq2_inner(op, x)))


class MarkupLMEmbeddings(RobertaEmbeddings):
    """RoBERTa's embeddings (padding-aware positions) plus the XPath embeddings, then LayerNorm."""

    def __init__(self, config: MarkupLMConfig) -> None:
        super().__init__(config)
        self.xpath_embeddings = XPathEmbeddings(config)

    def forward(self, op, input_ids, token_type_ids, xpath_tags_seq=None, xpath_subs_seq=None):
        x = self.word_embeddings(op, input_ids)  # [batch, seq, hidden]
        x = op.Add(x, self.position_embeddings(op, self.position_ids(op, input_ids)))
        if self.token_type_embeddings is not None:
            x = op.Add(x, self.token_type_embedding(op, token_type_ids))
        x = op.Add(x, self.xpath_embeddings(op, xpath_tags_seq, xpath_subs_seq))
        return self.LayerNorm(op, x)


class MarkupLMModel(BertModel):
    embeddings_class = MarkupLMEmbeddings


class MarkupLMForFeatureExtraction(BertForFeatureExtraction):
    """BERT's classification and span heads on the MarkupLM encoder (``markuplm.*``)."""

    config_class = MarkupLMConfig
    base_model_prefix = "markuplm"
    model_class = MarkupLMModel
    # transformers builds xpath_unitseq2_embeddings but its forward never reads it
    unread = (
        *BertForFeatureExtraction.unread,
        "embeddings.xpath_embeddings.xpath_unitseq2_embeddings.*",
    )

    def __init__(self, config: MarkupLMConfig) -> None:
        if config.head in ("masked-lm", "multiple-choice"):
            raise ConfigError(
                f"--head {config.head} is not built for markuplm: transformers has no such model"
            )
        super().__init__(config)

    def extra_inputs(self) -> dict[str, tuple[ir.DataType, list]]:
        shape = ["batch", "sequence", self.config.max_depth]
        return {
            "xpath_tags_seq": (ir.DataType.INT64, shape),
            "xpath_subs_seq": (ir.DataType.INT64, shape),
        }


MODEL_TYPES = {"markuplm": MarkupLMForFeatureExtraction}
