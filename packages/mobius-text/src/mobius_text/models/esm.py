"""ESM (ESM-1b, ESM-2): a pre-norm protein encoder with rotary or learned absolute positions.

What differs from BERT:

- pre-norm layers: ``attention.LayerNorm`` before self-attention, the layer's
  ``LayerNorm`` before the MLP (exact erf GELU whatever ``hidden_act`` says), plain
  residual adds after; ``encoder.emb_layer_norm_after`` closes the stack;
- positions: rotary (rotate-half, from the checkpoint's ``inv_freq``) or learned
  absolute ones counted from ``pad_token_id + 1`` over non-pad ids (fairseq); the
  embedding norm is optional (``emb_layer_norm_before``);
- ``token_dropout`` holds in eval mode too: ``<mask>`` embeddings are zeroed and the
  rest scaled by ``(1 - 0.15 * 0.8) / (1 - masked share of the row)``;
- padded positions' embeddings are zeroed; no token types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear, bidirectional_attention, padding_bias
from mobius.config import EncoderConfig
from mobius.errors import ConfigError
from mobius_text.models._bert_common import (
    ClassificationHead,
    EncoderForFeatureExtraction,
    ResidualDense,
)
from mobius_text.models._encoder_rotary import rotate_heads, sequence_positions
from mobius_text.models.bert import BertSelfAttention

MASK_RATIO_TRAIN = 0.15 * 0.8  # the share of masked tokens in every ESM training run
FLOAT = ir.DataType.FLOAT


@dataclass
class EsmConfig(EncoderConfig):
    """Encoder fields plus the position kind, the embedding norm and token dropout."""

    position_embedding_type: str = "absolute"
    emb_layer_norm_before: bool = False
    token_dropout: bool = False
    mask_token_id: int | None = None

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "is_folding_model", False):
            raise ConfigError("ESMFold (is_folding_model=True) is not an encoder mobius builds")
        if getattr(hf_config, "is_decoder", False):
            raise ConfigError("an ESM decoder (is_decoder=True) is not an encoder; not built")
        kind = hf_config.position_embedding_type or "absolute"
        if kind not in ("absolute", "rotary"):
            raise ConfigError(f"position_embedding_type {kind!r} is not built; absolute or rotary")
        if hf_config.token_dropout and hf_config.mask_token_id is None:
            raise ConfigError("token_dropout needs mask_token_id")
        return {
            **super().hf_fields(hf_config),
            "hidden_act": "gelu",  # ESM's own erf GELU, whatever the config names
            "position_embedding_type": kind,
            "emb_layer_norm_before": bool(hf_config.emb_layer_norm_before),
            "token_dropout": bool(hf_config.token_dropout),
            "mask_token_id": hf_config.mask_token_id,
        }


def fairseq_positions(op, input_ids, pad_id: int):
    """``pad + 1, pad + 2...`` over non-pad ids, ``pad`` on pads (create_position_ids_from_input_ids)."""
    real = op.Cast(op.Not(op.Equal(input_ids, pad_id)), to=ir.DataType.INT64)  # [batch, seq]
    return op.Add(op.Mul(op.CumSum(real, 1), real), pad_id)


class EsmEmbeddings(nn.Module):
    def __init__(self, config: EsmConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.word_embeddings = Embedding(config.vocab_size, hidden)
        self.position_embeddings = None
        if config.position_embedding_type == "absolute":
            self.position_embeddings = Embedding(config.max_position_embeddings, hidden)
        self.layer_norm = None
        if config.emb_layer_norm_before:
            self.layer_norm = LayerNorm(hidden, config.layer_norm_eps)
        self.config = config

    def drop_masked_tokens(self, op, x, input_ids, attention_mask):
        """Token dropout at inference: ``<mask>`` rows zeroed, the rest rescaled per sequence."""
        is_mask = op.Equal(input_ids, self.config.mask_token_id)  # [batch, seq]
        x = op.Where(op.Unsqueeze(is_mask, [-1]), op.CastLike(0.0, x), x)
        masked = op.ReduceSum(op.Cast(is_mask, to=FLOAT), [1], keepdims=0)  # pads count too, as HF
        lengths = op.ReduceSum(op.Cast(attention_mask, to=FLOAT), [1], keepdims=0)
        keep = op.Sub(1.0, op.Div(masked, lengths))  # [batch]
        scale = op.CastLike(op.Unsqueeze(keep, [1, 2]), x)
        return op.Div(op.Mul(x, op.CastLike(1.0 - MASK_RATIO_TRAIN, x)), scale)

    def forward(self, op, input_ids, attention_mask):
        x = self.word_embeddings(op, input_ids)  # [batch, seq, hidden]
        if self.config.token_dropout:
            x = self.drop_masked_tokens(op, x, input_ids, attention_mask)
        if self.position_embeddings is not None:
            positions = fairseq_positions(op, input_ids, self.config.pad_token_id)
            x = op.Add(x, self.position_embeddings(op, positions))
        if self.layer_norm is not None:
            x = self.layer_norm(op, x)
        return op.Mul(x, op.Unsqueeze(op.CastLike(attention_mask, x), [-1]))  # pads zeroed


class EsmRotaryEmbedding(nn.Module):
    """Rotate-half RoPE from the checkpoint's ``inv_freq [head_dim/2]``."""

    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.inv_freq = nn.Parameter([head_dim // 2])
        self.head_dim = head_dim

    def forward(self, op, position_ids):
        """``(cos, sin, head_dim)`` for :func:`rotate_heads`, each table ``[batch, seq, head_dim/2]``."""
        positions = op.Unsqueeze(op.Cast(position_ids, to=FLOAT), [-1])
        freqs = op.Mul(positions, op.Cast(self.inv_freq, to=FLOAT))
        return op.Cos(freqs), op.Sin(freqs), self.head_dim


class EsmSelfAttention(BertSelfAttention):
    def forward(self, op, x, rotary, bias):
        q, k, v = self.query(op, x), self.key(op, x), self.value(op, x)
        if rotary is not None:  # HF scales q before rotating; the rotation is linear
            q, k = (rotate_heads(op, t, rotary, self.num_heads) for t in (q, k))
        return bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)


class EsmAttention(nn.Module):
    def __init__(self, config: EsmConfig) -> None:
        super().__init__()
        self.self = EsmSelfAttention(config.hidden_size, config.num_attention_heads)
        self.output = ResidualDense(config.hidden_size, config.hidden_size)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, x, rotary, bias):
        return self.output(op, self.self(op, self.LayerNorm(op, x), rotary, bias), x)


class EsmIntermediate(nn.Module):
    def __init__(self, config: EsmConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.intermediate_size, bias=True)

    def forward(self, op, x):
        return op.Gelu(self.dense(op, x), approximate="none")


class EsmLayer(nn.Module):
    def __init__(self, config: EsmConfig) -> None:
        super().__init__()
        self.attention = EsmAttention(config)
        self.LayerNorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.intermediate = EsmIntermediate(config)
        self.output = ResidualDense(config.intermediate_size, config.hidden_size)

    def forward(self, op, x, rotary, bias):
        x = self.attention(op, x, rotary, bias)
        return self.output(op, self.intermediate(op, self.LayerNorm(op, x)), x)


class EsmEncoder(nn.Module):
    def __init__(self, config: EsmConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList([EsmLayer(config) for _ in range(config.num_hidden_layers)])
        self.emb_layer_norm_after = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, x, rotary, bias):
        for layer in self.layer:
            x = layer(op, x, rotary, bias)
        return self.emb_layer_norm_after(op, x)


class EsmModel(nn.Module):
    def __init__(self, config: EsmConfig) -> None:
        super().__init__()
        self.embeddings = EsmEmbeddings(config)
        self.rotary_embeddings = None
        if config.position_embedding_type == "rotary":
            self.rotary_embeddings = EsmRotaryEmbedding(config.head_dim)
        self.encoder = EsmEncoder(config)

    def forward(self, op, input_ids, attention_mask):
        x = self.embeddings(op, input_ids, attention_mask)
        rotary = None
        if self.rotary_embeddings is not None:
            rotary = self.rotary_embeddings(op, sequence_positions(op, input_ids))
        return self.encoder(op, x, rotary, padding_bias(op, attention_mask, x.dtype))


class EsmLMHead(nn.Module):
    """``decoder(layer_norm(gelu(dense(x)))) + bias``; the decoder is the word embeddings when tied."""

    def __init__(self, config: EsmConfig, embeddings: Embedding) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.dense = Linear(hidden, hidden, bias=True)
        self.layer_norm = LayerNorm(hidden, config.layer_norm_eps)
        tied = config.tie_word_embeddings
        self.decoder = None if tied else Linear(hidden, config.vocab_size, bias=False)
        self.bias = nn.Parameter([config.vocab_size])
        object.__setattr__(self, "embeddings", embeddings)  # owned by esm.embeddings

    def forward(self, op, x):
        x = self.layer_norm(op, op.Gelu(self.dense(op, x), approximate="none"))
        if self.decoder is not None:
            return op.Add(self.decoder(op, x), self.bias)
        table = op.Transpose(self.embeddings.weight, perm=[1, 0])  # [hidden, vocab]
        return op.Add(op.MatMul(x, table), self.bias)


class EsmForFeatureExtraction(EncoderForFeatureExtraction):
    """The encoder and the head its config names (``esm.*``, ``lm_head.*``, ``classifier``)."""

    config_class = EsmConfig
    base_model_prefix = "esm"
    model_class = EsmModel
    head_names = ("lm_head", "classifier")
    unread = ("pooler.*", "contact_head.*", "embeddings.position_ids")
    tied_copies = ("lm_head.decoder.weight",)

    def __init__(self, config: EsmConfig) -> None:
        super().__init__(config)
        hidden, labels = config.hidden_size, config.num_labels
        if config.head == "masked-lm":
            self.lm_head = EsmLMHead(config, self.esm.embeddings.word_embeddings)
        elif config.head == "sequence-classification":
            self.classifier = ClassificationHead(hidden, labels, "tanh")
        elif config.head == "token-classification":
            self.classifier = Linear(hidden, labels, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        hidden = self.esm(op, input_ids, attention_mask)
        outputs = {"last_hidden_state": hidden}
        head = self.lm_head or self.classifier
        if head is not None:
            outputs["logits"] = head(op, hidden)
        return outputs

    def sanitize(self, weights: dict) -> dict:
        """Undo the legacy names transformers reads (and writes) for ESM; add the ``esm.`` prefix.

        ``LayerNorm.gamma`` / ``.beta`` are ``LayerNorm.weight`` / ``.bias``; per-layer
        ``inv_freq`` copies (old checkpoints, or ``encoder.layer.*...`` as transformers
        5 saves it) are the one shared ``rotary_embeddings.inv_freq``.
        """
        legacy = {"LayerNorm.gamma": "LayerNorm.weight", "LayerNorm.beta": "LayerNorm.bias"}
        renamed = {}
        for key, value in weights.items():
            for old, new in legacy.items():
                key = key[: -len(old)] + new if key.endswith(old) else key
            renamed[key] = value
        weights = super().sanitize(renamed)
        per_layer = sorted(k for k in weights if k.endswith(".self.rotary_embeddings.inv_freq"))
        if per_layer:  # as EsmModel.load_hook: the first layer's copy is the shared one
            weights.setdefault("esm.rotary_embeddings.inv_freq", weights[per_layer[0]])
            for key in per_layer:
                del weights[key]
        return weights


MODEL_TYPES = {"esm": EsmForFeatureExtraction}
