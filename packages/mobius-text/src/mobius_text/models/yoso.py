"""YOSO in expectation mode: BERT's post-norm layers with the closed-form LSH attention.

What differs from BERT (and is shared with Nystromformer: positions from 2, ``cls``
masked-LM head, ``classifier.dense``/``out_proj`` sequence head with ``hidden_act``):

- attention (``use_expectation=True``, the config default): q and k are L2-normalised
  per head, the weights are ``(1 - acos(q . k) / pi) ** hash_code_len`` (the collision
  probability of ``hash_code_len`` random hyperplanes), unnormalised; the context
  ``weights @ v`` is L2-normalised per head;
- padding: transformers 5 hands the attention the 0/1 mask, which its
  ``int(1 + mask / 10000)`` turns into ones, so every key (pads included) is read; the
  graph does the same. The optional value conv (``conv_window``) reads ``v * mask``;
- multiple choice: ``relu(pre_classifier(x[:, 0]))``, then ``classifier`` (one score).

The sampled mode (``use_expectation=False``) draws random hyperplanes at every forward
(``torch.randn`` in ``hashing``) and needs transformers' CUDA kernel: it is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear, merge_heads, split_heads
from mobius.errors import ConfigError
from mobius_text.models._bert_common import first_token
from mobius_text.models.bert import BertAttention, BertConfig, BertEncoder, BertLayer
from mobius_text.models.nystromformer import (
    HeadConv,
    NystromformerEmbeddings,
    NystromformerForFeatureExtraction,
    NystromformerModel,
)


@dataclass
class YosoConfig(BertConfig):
    """BERT's fields plus the hash length (the weights' exponent) and the value conv's window."""

    hash_code_len: int = 9
    conv_window: int | None = None

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if not getattr(hf_config, "use_expectation", True):
            raise ConfigError(
                "use_expectation=False (sampled LSH attention) is not built: transformers draws "
                "random hashes at every forward and needs its CUDA kernel; only the expectation"
            )
        window = getattr(hf_config, "conv_window", None)
        if window is not None and window % 2 == 0:
            raise ConfigError(f"conv_window {window} is even: the conv would not keep the length")
        return {
            **super().hf_fields(hf_config),
            "hash_code_len": int(hf_config.hash_code_len),
            "conv_window": None if window is None else int(window),
        }


def _const(op, value: float, like):
    return op.CastLike(op.Constant(value_float=value), like)


def l2_normalize(op, x):
    """``x / max(||x||, 1e-12)`` over the last axis (``torch.nn.functional.normalize``)."""
    norm = op.ReduceL2(x, [-1], keepdims=1)
    return op.Div(x, op.Max(norm, _const(op, 1e-12, x)))


class YosoSelfAttention(nn.Module):
    def __init__(self, config: YosoConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.query = Linear(hidden, hidden, bias=True)
        self.key = Linear(hidden, hidden, bias=True)
        self.value = Linear(hidden, hidden, bias=True)
        window = config.conv_window
        self.conv = HeadConv(config.num_attention_heads, window) if window is not None else None
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.hash_code_len = config.hash_code_len

    def forward(self, op, x, mask):
        """``mask`` ``[batch, 1, seq, 1]`` (1 real, 0 pad), read by the value conv only."""
        q, k, v = (
            split_heads(op, proj(op, x), self.num_heads, self.head_dim)
            for proj in (self.query, self.key, self.value)
        )  # [batch, heads, seq, dim]
        cosine = op.MatMul(
            l2_normalize(op, q), op.Transpose(l2_normalize(op, k), perm=[0, 1, 3, 2])
        )
        collide = op.Sub(_const(op, 1.0, x), op.Div(op.Acos(cosine), _const(op, math.pi, x)))
        weights = op.Pow(collide, _const(op, float(self.hash_code_len), x))  # [b, h, seq, seq]
        context = l2_normalize(op, op.MatMul(weights, v))
        if self.conv is not None:
            context = op.Add(context, self.conv(op, op.Mul(v, mask)))
        return merge_heads(op, context)


class YosoLayer(BertLayer):
    def __init__(self, config: YosoConfig) -> None:
        super().__init__(config, BertAttention(config, YosoSelfAttention(config)))


class YosoEncoder(BertEncoder):
    layer_class = YosoLayer


class YosoModel(NystromformerModel):
    encoder_class = YosoEncoder
    embeddings_class = NystromformerEmbeddings  # positions from 2, as Nystromformer's

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        x = self.embeddings(op, input_ids, token_type_ids)  # [batch, seq, hidden]
        mask = op.Unsqueeze(op.CastLike(attention_mask, x), [1, 3])  # [batch, 1, seq, 1]
        return self.encoder(op, x, mask), None


class YosoForFeatureExtraction(NystromformerForFeatureExtraction):
    """BERT's tree under ``yoso.*`` (``cls.predictions``, ``classifier``, ``qa_outputs``)."""

    config_class = YosoConfig
    base_model_prefix = "yoso"
    model_class = YosoModel
    head_names = ("cls", "classifier", "qa_outputs", "pre_classifier")

    def __init__(self, config: YosoConfig) -> None:
        super().__init__(config)
        if config.head == "multiple-choice":  # before ``classifier``: relu(pre_classifier(x[:, 0]))
            self.pre_classifier = Linear(config.hidden_size, config.hidden_size, bias=True)

    def choice_classifier(self, config: YosoConfig) -> nn.Module:
        """``classifier``: one score per choice, after ``pre_classifier`` and ReLU."""
        return Linear(config.hidden_size, 1, bias=True)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        if self.config.head != "multiple-choice":
            return super().forward(op, input_ids, attention_mask, token_type_ids)
        hidden, _ = self.base_model(op, input_ids, attention_mask, token_type_ids)
        logits = self.classifier(op, op.Relu(self.pre_classifier(op, first_token(op, hidden))))
        return {"last_hidden_state": hidden, "logits": logits}


MODEL_TYPES = {"yoso": YosoForFeatureExtraction}
