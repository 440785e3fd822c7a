"""ModernBERT: a pre-norm encoder with RoPE and alternating global / sliding-window layers.

What differs from BERT:

- no position or token-type embeddings: RoPE in every layer, with its own base
  per layer kind (``rope_parameters`` keyed ``full_attention`` / ``sliding_attention``);
- local layers see keys within ``local_attention // 2`` of the query (both sides);
- pre-norm layers (layer 0 has no attention norm: the embedding norm plays its part),
  LayerNorms without bias unless ``norm_bias``, and a ``final_norm``;
- a fused ``Wqkv`` projection and a GLU MLP ``Wo(act(x) * gate)`` with ``[x, gate] = Wi(h)``;
- every head starts with ``head`` (dense, activation, norm); sequence classification
  pools first (``classifier_pooling``: the first token or the mean of real tokens).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from onnxscript import nn

from mobius.components import (
    Embedding,
    LayerNorm,
    Linear,
    bidirectional_attention,
    get_activation,
    padding_bias,
)
from mobius.config import EncoderConfig, RopeConfig
from mobius_text.models._bert_common import (
    POOLED_HEADS,
    EncoderForFeatureExtraction,
    VocabProjection,
    pool_first_or_mean,
)
from mobius_text.models._encoder_rotary import (
    EncoderRotary,
    rotate_heads,
    sequence_positions,
    window_bias,
)

FULL, SLIDING = "full_attention", "sliding_attention"


@dataclass
class ModernBertConfig(EncoderConfig):
    """Encoder fields plus the layer kinds, their ropes, the window and the bias switches."""

    norm_bias: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    decoder_bias: bool = True
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    classifier_pooling: str = "cls"
    local_attention: int = 128
    layer_types: list[str] = field(default_factory=list)
    layer_ropes: dict[str, RopeConfig] = field(default_factory=dict)

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        ropes = {
            kind: RopeConfig.from_hf(SimpleNamespace(rope_parameters=params))
            for kind, params in hf_config.rope_parameters.items()
        }
        return {
            **super().hf_fields(hf_config),
            "hidden_act": hf_config.hidden_activation,
            "layer_norm_eps": hf_config.norm_eps,
            "norm_bias": bool(hf_config.norm_bias),
            "attention_bias": bool(hf_config.attention_bias),
            "mlp_bias": bool(hf_config.mlp_bias),
            "decoder_bias": bool(hf_config.decoder_bias),
            "classifier_bias": bool(hf_config.classifier_bias),
            "classifier_activation": hf_config.classifier_activation,
            "classifier_pooling": hf_config.classifier_pooling,
            "local_attention": int(hf_config.local_attention),
            "layer_types": list(hf_config.layer_types),
            "layer_ropes": ropes,
        }


def norm(config: ModernBertConfig) -> LayerNorm:
    return LayerNorm(config.hidden_size, config.layer_norm_eps, config.norm_bias)


class ModernBertAttention(nn.Module):
    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.Wqkv = Linear(hidden, 3 * hidden, config.attention_bias)
        self.Wo = Linear(hidden, hidden, config.attention_bias)
        self.num_heads, self.scale = config.num_attention_heads, config.head_dim**-0.5

    def forward(self, op, x, rotary, bias):
        q, k, v = op.Split(self.Wqkv(op, x), num_outputs=3, axis=-1, _outputs=3)
        q, k = (rotate_heads(op, t, rotary, self.num_heads) for t in (q, k))
        return self.Wo(op, bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale))


class ModernBertMLP(nn.Module):
    """``Wo(act(x) * gate)`` where ``Wi`` yields ``[x, gate]``."""

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.Wi = Linear(config.hidden_size, 2 * config.intermediate_size, config.mlp_bias)
        self.Wo = Linear(config.intermediate_size, config.hidden_size, config.mlp_bias)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, h):
        x, gate = op.Split(self.Wi(op, h), num_outputs=2, axis=-1, _outputs=2)
        return self.Wo(op, op.Mul(self.act(op, x), gate))


class ModernBertEncoderLayer(nn.Module):
    def __init__(self, config: ModernBertConfig, layer_idx: int) -> None:
        super().__init__()
        self.attn_norm = norm(config) if layer_idx != 0 else None
        self.attn = ModernBertAttention(config)
        self.mlp_norm = norm(config)
        self.mlp = ModernBertMLP(config)
        self.attention_type = config.layer_types[layer_idx]

    def forward(self, op, x, rotary, bias):
        h = self.attn_norm(op, x) if self.attn_norm is not None else x
        x = op.Add(x, self.attn(op, h, rotary, bias))
        return op.Add(x, self.mlp(op, self.mlp_norm(op, x)))


class ModernBertEmbeddings(nn.Module):
    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.tok_embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.norm = norm(config)

    def forward(self, op, input_ids):
        return self.norm(op, self.tok_embeddings(op, input_ids))


class ModernBertModel(nn.Module):
    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.embeddings = ModernBertEmbeddings(config)
        self.layers = nn.ModuleList(
            [ModernBertEncoderLayer(config, i) for i in range(config.num_hidden_layers)]
        )
        self.final_norm = norm(config)
        kinds = sorted(set(config.layer_types))
        self.ropes = {
            kind: EncoderRotary(
                config.layer_ropes[kind], config.head_dim, config.max_position_embeddings
            )
            for kind in kinds
        }
        self.window = config.local_attention // 2

    def forward(self, op, input_ids, attention_mask):
        x = self.embeddings(op, input_ids)  # [batch, seq, hidden]
        positions = sequence_positions(op, input_ids)  # [batch, seq]
        full = padding_bias(op, attention_mask, x.dtype)  # [batch, 1, seq, seq]
        biases = {FULL: full}
        if SLIDING in self.ropes:
            first_row = op.Slice(positions, [0], [1], [0])  # [1, seq]
            biases[SLIDING] = window_bias(op, full, first_row, self.window, x.dtype)
        # kind -> (cos, sin, rotary_dim), computed once and shared by the layers of that kind
        rotary = {kind: rope(op, positions) for kind, rope in self.ropes.items()}
        for layer in self.layers:
            kind = layer.attention_type
            x = layer(op, x, rotary[kind], biases[kind])
        return self.final_norm(op, x)


class ModernBertPredictionHead(nn.Module):
    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.hidden_size, config.classifier_bias)
        self.act = get_activation(config.classifier_activation)
        self.norm = norm(config)

    def forward(self, op, x):
        return self.norm(op, self.act(op, self.dense(op, x)))


# Every head with weights reads ``head``'s transform first (question answering: per token).
HEADS_ON_PREDICTION_HEAD = (
    "masked-lm",
    "sequence-classification",
    "token-classification",
    "question-answering",
    "multiple-choice",
)


class ModernBertForFeatureExtraction(EncoderForFeatureExtraction):
    """The encoder and the head its config names (``model.*``, ``head.*``, ``decoder``/``classifier``)."""

    config_class = ModernBertConfig
    base_model_prefix = "model"
    model_class = ModernBertModel
    head_names = ("head", "decoder", "classifier")
    tied_copies = ("decoder.weight",)

    def __init__(self, config: ModernBertConfig) -> None:
        super().__init__(config)
        hidden, vocab = config.hidden_size, config.vocab_size
        if config.head in HEADS_ON_PREDICTION_HEAD:
            self.head = ModernBertPredictionHead(config)
        if config.head == "masked-lm":  # its weight, or the token embeddings when tied
            embeddings, tied = self.model.embeddings.tok_embeddings, config.tie_word_embeddings
            self.decoder = VocabProjection(hidden, vocab, embeddings, tied, config.decoder_bias)
        elif self.head is not None:  # multiple choice: one score; question answering: two
            labels = 1 if config.head == "multiple-choice" else config.num_labels
            self.classifier = Linear(hidden, labels, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden = self.model(op, input_ids, attention_mask)
        outputs = {"last_hidden_state": hidden}
        if self.config.head in POOLED_HEADS:
            pooled = pool_first_or_mean(op, hidden, attention_mask, self.config.classifier_pooling)
            outputs["logits"] = self.classifier(op, self.head(op, pooled))
        elif self.head is not None:
            head_out = self.decoder or self.classifier
            outputs["logits"] = head_out(op, self.head(op, hidden))
        return outputs


MODEL_TYPES = {"modernbert": ModernBertForFeatureExtraction}
