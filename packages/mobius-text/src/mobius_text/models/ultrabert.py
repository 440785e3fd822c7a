"""UltraBERT: EuroBERT's layers with ModernBERT's alternating global / sliding-window attention.

What differs from EuroBERT (:mod:`.eurobert`):

- ``layer_types`` (``full_attention`` / ``sliding_attention``): sliding layers see keys
  within ``sliding_window`` of the query, both sides, inclusive; each kind has its own
  RoPE base (``rope_parameters`` keyed by kind, as ModernBERT's);
- heads: the masked LM is ``cls(gelu_tanh(head.linear2(gelu_tanh(head.linear1(x)))))``
  without biases (``cls`` tied to ``ultrabert.embed_tokens`` only when
  ``tie_word_embeddings``); sequence classification is ``classifier`` on the first token
  or the mean of the real tokens (``classifier_pooling``); token classification a
  per-token ``classifier``; question answering ``qa_outputs`` per token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from onnxscript import nn

from mobius.components import Embedding, Linear, RMSNorm, get_activation, padding_bias
from mobius.config import EncoderConfig, RopeConfig
from mobius.errors import ConfigError
from mobius_text.models._bert_common import (
    EncoderForFeatureExtraction,
    VocabProjection,
    pool_first_or_mean,
)
from mobius_text.models._encoder_rotary import EncoderRotary, sequence_positions, window_bias
from mobius_text.models.eurobert import EuroBertConfig, EuroBertDecoderLayer

FULL, SLIDING = "full_attention", "sliding_attention"


@dataclass
class UltrabertConfig(EuroBertConfig):
    """EuroBERT's fields plus the layer kinds, their ropes, the window and the MLM head width."""

    classifier_pooling: str = "cls"
    sliding_window: int = 128
    prediction_head_size: int = 768
    layer_types: list[str] = field(default_factory=list)
    layer_ropes: dict[str, RopeConfig] = field(default_factory=dict)

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        pooling = hf_config.classifier_pooling
        if pooling not in ("cls", "mean"):
            raise ConfigError(f"classifier_pooling {pooling!r} is not one of cls, mean")
        fields = EncoderConfig.hf_fields(hf_config)  # EuroBERT's reads its own pooling names
        heads = fields["num_attention_heads"]
        ropes = {
            kind: RopeConfig.from_hf(SimpleNamespace(rope_parameters=params))
            for kind, params in hf_config.rope_parameters.items()
        }
        return {
            **fields,
            "type_vocab_size": 0,
            "layer_norm_eps": float(hf_config.rms_norm_eps),
            "num_key_value_heads": int(hf_config.num_key_value_heads or heads),
            "head_dim": int(hf_config.head_dim or fields["hidden_size"] // heads),
            "attention_bias": bool(hf_config.attention_bias),
            "mlp_bias": bool(hf_config.mlp_bias),
            "classifier_pooling": pooling,
            "sliding_window": int(hf_config.sliding_window),
            "prediction_head_size": int(hf_config.prediction_head_size),
            "layer_types": list(hf_config.layer_types),
            "layer_ropes": ropes,
        }


class UltrabertModel(nn.Module):
    def __init__(self, config: UltrabertConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        layers = [EuroBertDecoderLayer(config) for _ in range(config.num_hidden_layers)]
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(config.hidden_size, config.layer_norm_eps)
        kinds = sorted(set(config.layer_types))
        self.ropes = {
            kind: EncoderRotary(
                config.layer_ropes[kind], config.head_dim, config.max_position_embeddings
            )
            for kind in kinds
        }
        self.layer_types, self.window = config.layer_types, config.sliding_window

    def forward(self, op, input_ids, attention_mask):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden]
        positions = sequence_positions(op, input_ids)  # [batch, seq]
        full = padding_bias(op, attention_mask, x.dtype)  # [batch, 1, seq, seq]
        biases = {FULL: full}
        if SLIDING in self.ropes:
            first_row = op.Slice(positions, [0], [1], [0])  # [1, seq]
            biases[SLIDING] = window_bias(op, full, first_row, self.window, x.dtype)
        # kind -> (cos, sin, rotary_dim), shared by the layers of that kind
        rotary = {kind: rope(op, positions) for kind, rope in self.ropes.items()}
        for layer, kind in zip(self.layers, self.layer_types, strict=True):
            x = layer(op, x, rotary[kind], biases[kind])
        return self.norm(op, x)


class UltrabertPredictionHead(nn.Module):
    """``act(linear2(act(linear1(x))))``, tanh-approximated GELU, no biases."""

    def __init__(self, config: UltrabertConfig) -> None:
        super().__init__()
        hidden, width = config.hidden_size, config.prediction_head_size
        self.linear1 = Linear(hidden, width, bias=False)
        self.linear2 = Linear(width, hidden, bias=False)
        self.act = get_activation("gelu_pytorch_tanh")

    def forward(self, op, x):
        return self.act(op, self.linear2(op, self.act(op, self.linear1(op, x))))


class UltrabertForFeatureExtraction(EncoderForFeatureExtraction):
    """The encoder and the head its config names, under the checkpoints' names.

    Checkpoints (and transformers' ``save_pretrained``) keep ``ultrabert.*`` for the
    encoder and ``cls.weight`` for the masked LM's decoder (``head.decoder`` once
    loaded); ``head.linear1`` / ``linear2``, ``classifier`` and ``qa_outputs`` as they are.
    """

    config_class = UltrabertConfig
    base_model_prefix = "ultrabert"
    model_class = UltrabertModel
    head_names = ("head", "cls", "classifier", "qa_outputs")
    tied_copies = ("cls.weight",)
    #: transformers' in-memory names (a state dict saved without its conversion mapping)
    loaded_names = (("model.", "ultrabert."), ("head.decoder.", "cls."))

    def __init__(self, config: UltrabertConfig) -> None:
        super().__init__(config)
        hidden, vocab = config.hidden_size, config.vocab_size
        if config.head == "masked-lm":  # cls: its weight, or ultrabert.embed_tokens when tied
            self.head = UltrabertPredictionHead(config)
            embeddings, tied = self.ultrabert.embed_tokens, config.tie_word_embeddings
            self.cls = VocabProjection(hidden, vocab, embeddings, tied, bias=False)
        elif config.head in ("sequence-classification", "token-classification"):
            self.classifier = Linear(hidden, config.num_labels, bias=True)
        elif config.head == "question-answering":
            self.qa_outputs = Linear(hidden, 2, bias=True)  # [start, end]

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden = self.ultrabert(op, input_ids, attention_mask)
        outputs = {"last_hidden_state": hidden}
        if self.cls is not None:
            outputs["logits"] = self.cls(op, self.head(op, hidden))  # [batch, seq, vocab]
        elif self.config.head == "sequence-classification":
            pooled = pool_first_or_mean(op, hidden, attention_mask, self.config.classifier_pooling)
            outputs["logits"] = self.classifier(op, pooled)
        elif (head := self.classifier or self.qa_outputs) is not None:
            outputs["logits"] = head(op, hidden)
        return outputs

    def sanitize(self, weights: dict) -> dict:
        """Checkpoint names for transformers' loaded ones; a bare encoder gets ``ultrabert.``."""
        renamed = {}
        for key, value in weights.items():
            for loaded, saved in self.loaded_names:
                key = saved + key[len(loaded) :] if key.startswith(loaded) else key
            renamed[key] = value
        return super().sanitize(renamed)


MODEL_TYPES = {"ultrabert": UltrabertForFeatureExtraction}
