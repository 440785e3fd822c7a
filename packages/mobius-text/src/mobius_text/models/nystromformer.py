"""Nystromformer: BERT's post-norm layers with Nystrom landmark attention and a conv on values.

What differs from BERT:

- positions start at 2 (the table has ``max_position_embeddings + 2`` rows);
- q and k are each divided by ``head_dim ** 0.25``; when ``num_landmarks`` differs
  from ``segment_means_seq_len`` the softmax is approximated with landmarks (means of
  ``segment_means_seq_len // num_landmarks`` consecutive tokens, reshaped as
  transformers does, batch axis ``-1``), and the landmark kernel is inverted with six
  steps of the iterative Moore-Penrose method, its start scaled by the largest column
  sum of the whole batch; when the two are equal the attention is exact softmax;
- a depthwise conv over the sequence (``conv``, kernel ``conv_kernel_size``, per head)
  adds the values to the context. It reads every position, padding included, as
  transformers does, so a pad token's value reaches its real neighbours;
- the padding mask masks keys. transformers 5 adds its ``[batch, 1, seq, seq]`` mask
  to the landmark scores ``[batch, heads, landmarks, seq]``, which fails unless
  ``num_landmarks`` is the sequence length (its rows are all alike, so a key mask
  ``[batch, 1, 1, seq]`` is the same thing); landmark mode here masks keys that way,
  as transformers 4 did, and matches transformers wherever it runs (no padding);
- sequence classification has no pooler: ``classifier.dense``, ``hidden_act``,
  ``out_proj`` on the first token (RoFormer's head).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, Linear, merge_heads, split_heads
from mobius.errors import ConfigError
from mobius_text.models._bert_common import ClassificationHead
from mobius_text.models.bert import (
    BertAttention,
    BertConfig,
    BertEmbeddings,
    BertEncoder,
    BertForFeatureExtraction,
    BertLayer,
    BertModel,
)

INVERSE_STEPS = 6  # transformers' iterative_inv(n_iter=6)


@dataclass
class NystromformerConfig(BertConfig):
    """BERT's fields plus the landmark count, the segment length and the value conv's kernel."""

    segment_means_seq_len: int = 64
    num_landmarks: int = 64
    conv_kernel_size: int | None = 65

    @property
    def uses_landmarks(self) -> bool:
        return self.num_landmarks != self.segment_means_seq_len

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if getattr(hf_config, "inv_coeff_init_option", False):
            raise ConfigError(
                "inv_coeff_init_option=True is not built (transformers reads it as "
                "config['inv_init_coeff_option'] and fails); only the original coefficient"
            )
        kernel = getattr(hf_config, "conv_kernel_size", None)
        if kernel is not None and kernel % 2 == 0:
            raise ConfigError(
                f"conv_kernel_size {kernel} is even: the conv would not keep the length"
            )
        segment, landmarks = int(hf_config.segment_means_seq_len), int(hf_config.num_landmarks)
        if landmarks != segment and segment % landmarks:
            raise ConfigError(
                f"segment_means_seq_len {segment} is not a multiple of num_landmarks {landmarks}"
            )
        return {
            **super().hf_fields(hf_config),
            "segment_means_seq_len": segment,
            "num_landmarks": landmarks,
            "conv_kernel_size": None if kernel is None else int(kernel),
        }


class NystromformerEmbeddings(BertEmbeddings):
    def __init__(self, config: NystromformerConfig) -> None:
        super().__init__(config)
        rows = config.max_position_embeddings + 2
        self.position_embeddings = Embedding(rows, config.hidden_size)

    def position_ids(self, op, input_ids):
        """``[1, seq]``: 2, 3, 4... (transformers' buffer is ``arange(max) + 2``)."""
        return op.Add(super().position_ids(op, input_ids), op.Constant(value_int=2))


class HeadConv(nn.Module):
    """``Conv2d(heads, heads, (kernel, 1), groups=heads)`` over ``[batch, heads, seq, dim]``, no bias."""

    def __init__(self, num_heads: int, kernel: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([num_heads, 1, kernel, 1])
        self.num_heads, self.pad = num_heads, kernel // 2

    def forward(self, op, x):
        return op.Conv(x, self.weight, group=self.num_heads, pads=[self.pad, 0, self.pad, 0])


def _const(op, value, like):
    return op.CastLike(op.Constant(value=ir.tensor(np.asarray(value, np.float32))), like)


def _t(op, x):
    return op.Transpose(x, perm=[0, 1, 3, 2])


def iterative_inverse(op, mat, size: int):
    """transformers' ``iterative_inv`` (``"original"`` start): the Moore-Penrose inverse of ``mat``."""
    eye = np.eye(size, dtype=np.float32)
    i7, i13, i15 = (_const(op, c * eye, mat) for c in (7, 13, 15))
    largest = op.ReduceMax(op.ReduceSum(mat, [-2], keepdims=0), keepdims=0)  # over the whole batch
    value = op.Mul(op.Div(_const(op, 1.0, mat), largest), _t(op, mat))
    quarter = _const(op, 0.25, mat)
    for _ in range(INVERSE_STEPS):
        kv = op.MatMul(mat, value)
        inner = op.Sub(i13, op.MatMul(kv, op.Sub(i15, op.MatMul(kv, op.Sub(i7, kv)))))
        value = op.MatMul(op.Mul(quarter, value), inner)
    return value


class NystromformerSelfAttention(nn.Module):
    def __init__(self, config: NystromformerConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.query = Linear(hidden, hidden, bias=True)
        self.key = Linear(hidden, hidden, bias=True)
        self.value = Linear(hidden, hidden, bias=True)
        kernel = config.conv_kernel_size
        self.conv = HeadConv(config.num_attention_heads, kernel) if kernel is not None else None
        self.num_heads, self.head_dim = config.num_attention_heads, config.head_dim
        self.landmarks = config.num_landmarks if config.uses_landmarks else None
        self.segment = config.segment_means_seq_len // config.num_landmarks

    def heads(self, op, x):
        """``[batch, seq, heads*dim]`` -> ``[batch, heads, seq, dim]``."""
        return split_heads(op, x, self.num_heads, self.head_dim)

    def landmarks_of(self, op, x):
        """Segment means, reshaped as transformers does: ``[-1, heads, landmarks, dim]``."""
        shape = [-1, self.num_heads, self.landmarks, self.segment, self.head_dim]
        return op.ReduceMean(op.Reshape(x, shape), [-2], keepdims=0)

    def forward(self, op, x, bias):
        root = _const(op, self.head_dim**0.25, x)
        q = op.Div(self.heads(op, self.query(op, x)), root)
        k = op.Div(self.heads(op, self.key(op, x)), root)
        v = self.heads(op, self.value(op, x))
        if self.landmarks is None:
            probs = op.Softmax(op.Add(op.MatMul(q, _t(op, k)), bias), axis=-1)
            context = op.MatMul(probs, v)
        else:
            q_land, k_land = self.landmarks_of(op, q), self.landmarks_of(op, k)
            kernel_1 = op.Softmax(op.MatMul(q, _t(op, k_land)), axis=-1)
            kernel_2 = op.Softmax(op.MatMul(q_land, _t(op, k_land)), axis=-1)
            kernel_3 = op.Softmax(op.Add(op.MatMul(q_land, _t(op, k)), bias), axis=-1)
            probs = op.MatMul(kernel_1, iterative_inverse(op, kernel_2, self.landmarks))
            context = op.MatMul(probs, op.MatMul(kernel_3, v))
        if self.conv is not None:
            context = op.Add(context, self.conv(op, v))
        return merge_heads(op, context)


class NystromformerLayer(BertLayer):
    def __init__(self, config: NystromformerConfig) -> None:
        super().__init__(config, BertAttention(config, NystromformerSelfAttention(config)))


class NystromformerEncoder(BertEncoder):
    layer_class = NystromformerLayer

    def __init__(self, config: NystromformerConfig) -> None:
        super().__init__(config)
        self.uses_landmarks = config.uses_landmarks

    def forward(self, op, x, bias):
        if self.uses_landmarks:  # a key mask [batch, 1, 1, seq] for the landmark rows
            bias = op.Slice(bias, [0], [1], [2])
        return super().forward(op, x, bias)


class NystromformerModel(BertModel):
    embeddings_class = NystromformerEmbeddings
    encoder_class = NystromformerEncoder
    pooled = False  # the classification head reads the first token itself


class NystromformerForFeatureExtraction(BertForFeatureExtraction):
    """BERT's tree under ``nystromformer.*`` (``cls.predictions``, ``classifier``); multiple
    choice scores ``classifier(relu(pre_classifier(x[:, 0])))`` per choice (no pooler)."""

    config_class = NystromformerConfig
    base_model_prefix = "nystromformer"
    model_class = NystromformerModel
    head_names = (*BertForFeatureExtraction.head_names, "pre_classifier")

    def __init__(self, config: NystromformerConfig) -> None:
        super().__init__(config)
        if config.head == "multiple-choice":
            self.pre_classifier = Linear(config.hidden_size, config.hidden_size, bias=True)

    def sequence_classifier(self, config: NystromformerConfig) -> nn.Module:
        """``classifier.dense``, the activation, ``out_proj`` on the first token (no pooler)."""
        return ClassificationHead(config.hidden_size, config.num_labels, config.hidden_act)

    def forward(self, op, input_ids, attention_mask, token_type_ids):
        if self.config.head != "multiple-choice":
            return super().forward(op, input_ids, attention_mask, token_type_ids)
        hidden, _ = self.base_model(op, input_ids, attention_mask, token_type_ids)
        first = op.Squeeze(op.Slice(hidden, [0], [1], [1]), [1])  # [rows, hidden]
        score = self.classifier(op, op.Relu(self.pre_classifier(op, first)))  # [rows, 1]
        return {"last_hidden_state": hidden, "logits": score}


MODEL_TYPES = {"nystromformer": NystromformerForFeatureExtraction}
