"""XLM: learned (or sinusoidal-initialised) positions, post-norm layers held in parallel lists.

What differs from BERT:

- the layers are four parallel lists (``attentions``, ``layer_norm1``, ``ffns``,
  ``layer_norm2``) under ``transformer``, the FFN is ``4 * emb_dim`` wide (GELU or ReLU);
- ``token_type_ids`` index the *word* embeddings (XLM's tokenizer gives them);
- the hidden states of pads are zeroed after the embeddings and after every layer;
- language embeddings are added only for a ``langs`` input: a multilingual model
  that uses them is refused rather than built without them;
- ``causal`` models mask the future (and, as HF does, not the padding);
- sequence classification is a ``sequence_summary`` of the first / last / mean state,
  which multiple choice narrows to one score (``logits_proj``); question answering is
  the simple span head (``qa_outputs``), not ``XLMForQuestionAnswering``'s beam search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    LayerNorm,
    Linear,
    bidirectional_attention,
    get_activation,
    lowest_value,
    padding_bias,
)
from mobius.config import EncoderConfig
from mobius.errors import ConfigError
from mobius_text.models._bert_common import (
    EncoderForFeatureExtraction,
    SequenceSummary,
    VocabProjection,
)
from mobius_text.models._encoder_rotary import sequence_positions


@dataclass
class XLMConfig(EncoderConfig):
    """Encoder fields plus causality and the sequence summary of the classification head."""

    causal: bool = False
    asm: bool = False
    summary_type: str = "first"
    summary_activation: str | None = None
    summary_to_labels: bool = True  # summary_use_proj and summary_proj_to_labels

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if hf_config.n_langs > 1 and hf_config.use_lang_emb:
            raise ConfigError(
                f"this XLM model adds language embeddings ({hf_config.n_langs} languages) from a "
                "`langs` input that the feature-extraction graph does not have; not built"
            )
        if not hf_config.is_encoder:
            raise ConfigError("an XLM decoder (is_encoder=False) is not built")
        if hf_config.summary_type not in ("first", "last", "mean", "cls_index"):
            raise ConfigError(f"summary_type {hf_config.summary_type!r} is not built")
        fields = super().hf_fields(hf_config)
        return {
            **fields,
            "intermediate_size": 4 * fields["hidden_size"],  # XLM's FFN width, whatever else is set
            "hidden_act": "gelu" if hf_config.gelu_activation else "relu",
            "type_vocab_size": 0,
            "causal": bool(hf_config.causal),
            "asm": bool(hf_config.asm),
            "summary_type": hf_config.summary_type,
            "summary_activation": hf_config.summary_activation,
            "summary_to_labels": bool(
                hf_config.summary_use_proj and hf_config.summary_proj_to_labels
            ),
        }


def causal_bias(op, positions, dtype: ir.DataType):
    """``[1, 1, seq, seq]``: 0 where the key is not after the query, else the lowest value."""
    queries, keys = op.Unsqueeze(positions, [-1]), op.Unsqueeze(positions, [-2])
    zero = op.Constant(value=ir.tensor(np.array(0, dtype=dtype.numpy())))
    lowest = op.Constant(value=ir.tensor(np.array(lowest_value(dtype), dtype=dtype.numpy())))
    return op.Unsqueeze(op.Where(op.LessOrEqual(keys, queries), zero, lowest), [1])


class MultiHeadAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.q_lin = Linear(dim, dim, bias=True)
        self.k_lin = Linear(dim, dim, bias=True)
        self.v_lin = Linear(dim, dim, bias=True)
        self.out_lin = Linear(dim, dim, bias=True)
        self.num_heads, self.scale = num_heads, (dim // num_heads) ** -0.5

    def forward(self, op, x, bias):
        q, k, v = self.q_lin(op, x), self.k_lin(op, x), self.v_lin(op, x)
        attended = bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)
        return self.out_lin(op, attended)


class TransformerFFN(nn.Module):
    def __init__(self, dim: int, hidden: int, act: str) -> None:
        super().__init__()
        self.lin1 = Linear(dim, hidden, bias=True)
        self.lin2 = Linear(hidden, dim, bias=True)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.lin2(op, self.act(op, self.lin1(op, x)))


class XLMModel(nn.Module):
    """Embeddings and layers, named as ``XLMModel``'s (the checkpoint's ``transformer``)."""

    def __init__(self, config: XLMConfig) -> None:
        super().__init__()
        dim, eps, layers = config.hidden_size, config.layer_norm_eps, config.num_hidden_layers
        self.position_embeddings = Embedding(config.max_position_embeddings, dim)
        self.embeddings = Embedding(config.vocab_size, dim)
        self.layer_norm_emb = LayerNorm(dim, eps)
        heads, hidden, act = config.num_attention_heads, config.intermediate_size, config.hidden_act
        self.attentions = nn.ModuleList([MultiHeadAttention(dim, heads) for _ in range(layers)])
        self.layer_norm1 = nn.ModuleList([LayerNorm(dim, eps) for _ in range(layers)])
        self.ffns = nn.ModuleList([TransformerFFN(dim, hidden, act) for _ in range(layers)])
        self.layer_norm2 = nn.ModuleList([LayerNorm(dim, eps) for _ in range(layers)])
        self.causal = config.causal

    def block(self, op, i: int, x, bias):
        """Layer ``i``, post-norm: ``norm1(x + attn(x))``, then ``norm2(x + ffn(x))``."""
        x = self.layer_norm1[i](op, op.Add(x, self.attentions[i](op, x, bias)))
        return self.layer_norm2[i](op, op.Add(x, self.ffns[i](op, x)))

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        positions = sequence_positions(op, input_ids)  # [batch, seq]
        x = op.Add(self.embeddings(op, input_ids), self.position_embeddings(op, positions))
        if token_type_ids is not None:  # XLM looks token types up in the word embeddings
            x = op.Add(x, self.embeddings(op, token_type_ids))
        real = op.Unsqueeze(op.CastLike(attention_mask, x), [-1])  # [batch, seq, 1]
        x = op.Mul(self.layer_norm_emb(op, x), real)
        if self.causal:  # HF's causal mask replaces the padding mask
            bias = causal_bias(op, op.Slice(positions, [0], [1], [0]), x.dtype)
        else:
            bias = padding_bias(op, attention_mask, x.dtype)
        for i in range(len(self.attentions)):
            x = op.Mul(self.block(op, i, x, bias), real)
        return x


def summary_to_labels(config: XLMConfig) -> SequenceSummary:
    """``sequence_summary``: the summary state projected onto the labels."""
    act, kind = config.summary_activation, config.summary_type
    return SequenceSummary(config.hidden_size, config.num_labels, act, kind)


class XLMHeadModule(nn.Module):
    """``pred_layer.proj``: the vocabulary projection, tied to the word embeddings unless untied."""

    def __init__(self, config: XLMConfig, embeddings: Embedding) -> None:
        super().__init__()
        hidden, vocab, tied = config.hidden_size, config.vocab_size, config.tie_word_embeddings
        self.proj = VocabProjection(hidden, vocab, embeddings, tied)

    def forward(self, op, x):
        return self.proj(op, x)


class XLMForFeatureExtraction(EncoderForFeatureExtraction):
    """The encoder and the head its config names (``transformer.*``, ``pred_layer``...)."""

    config_class = XLMConfig
    uses_token_type_ids = True
    base_model_prefix = "transformer"
    model_class = XLMModel
    head_names = ("pred_layer", "sequence_summary", "logits_proj", "classifier", "qa_outputs")
    unread = ("position_ids",)
    tied_copies = ("pred_layer.proj.weight",)

    def __init__(self, config: XLMConfig) -> None:
        super().__init__(config)
        if config.head == "masked-lm":
            if config.asm:
                raise ConfigError("an adaptive-softmax (asm=True) LM head is not built")
            self.pred_layer = XLMHeadModule(config, self.transformer.embeddings)
        elif config.head in ("sequence-classification", "multiple-choice"):
            if not config.summary_to_labels:  # its logits would not be [batch, num_labels]
                raise ConfigError("a sequence summary not projected to the labels is not built")
            self.sequence_summary = summary_to_labels(config)
            if config.head == "multiple-choice":  # the labels' scores down to one per choice
                self.logits_proj = Linear(config.num_labels, 1, bias=True)
        elif config.head == "token-classification":
            self.classifier = Linear(config.hidden_size, config.num_labels, bias=True)
        elif config.head == "question-answering":  # XLMForQuestionAnsweringSimple's span head
            self.qa_outputs = Linear(config.hidden_size, config.num_labels, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden = self.transformer(op, input_ids, attention_mask, token_type_ids)
        outputs = {"last_hidden_state": hidden}
        head = self.pred_layer or self.sequence_summary or self.classifier or self.qa_outputs
        if head is not None:
            outputs["logits"] = head(op, hidden)
        if self.logits_proj is not None:
            outputs["logits"] = self.logits_proj(op, outputs["logits"])
        return outputs


MODEL_TYPES = {"xlm": XLMForFeatureExtraction}
