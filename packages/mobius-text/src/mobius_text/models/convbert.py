"""ConvBERT: ELECTRA's model and heads, with half of each layer's heads made span-based convolutions.

Self-attention keeps ``num_attention_heads // head_ratio`` heads of size ``d``
(``hidden // heads // 2``); as many convolution heads sit beside them. A
convolution head predicts, per token, a softmax kernel over the ``conv_kernel_size``
neighbouring tokens from ``query * separable_conv(x)``, and applies it to
``conv_out_layer(x)``. Like transformers, the convolutions see padded positions
(zeros only beyond the sequence ends). Feed-forward layers may be grouped
(``num_groups``). The module tree follows ``ConvBertFor*`` checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, bidirectional_attention
from mobius.errors import ConfigError
from mobius_text.models._bert_common import ClassificationHead
from mobius_text.models.bert import BertAttention, BertEncoder, BertLayer
from mobius_text.models.electra import ElectraConfig, ElectraForFeatureExtraction, ElectraModel


@dataclass
class ConvBertConfig(ElectraConfig):
    head_ratio: int = 2
    conv_kernel_size: int = 9
    num_groups: int = 1

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        fields.update(
            head_ratio=hf_config.head_ratio,
            conv_kernel_size=hf_config.conv_kernel_size,
            num_groups=hf_config.num_groups,
        )
        if fields["conv_kernel_size"] % 2 == 0:  # transformers pads K // 2 and (K - 1) // 2
            raise ConfigError("conv_kernel_size must be odd")
        return fields

    @property
    def attention_heads(self) -> int:
        """The attention heads left beside the convolution heads (at least one)."""
        return max(self.num_attention_heads // self.head_ratio, 1)


class Conv1d(nn.Module):
    """A bias-free convolution over the sequence, on channels-first ``[batch, channels, seq]``."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, groups: int = 1):
        super().__init__()
        self.weight = nn.Parameter([out_channels, in_channels // groups, kernel_size])
        self.groups, self.pad = groups, kernel_size // 2

    def forward(self, op, x):
        return op.Conv(x, self.weight, group=self.groups, pads=[self.pad, self.pad])


class SeparableConv1D(nn.Module):
    """A depthwise convolution over the sequence, then a pointwise one, plus ``bias [out, 1]``."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int) -> None:
        super().__init__()
        self.depthwise = Conv1d(in_channels, in_channels, kernel_size, groups=in_channels)
        self.pointwise = Conv1d(in_channels, out_channels, 1)
        self.bias = nn.Parameter([out_channels, 1])

    def forward(self, op, x):
        x = self.depthwise(op, op.Transpose(x, perm=[0, 2, 1]))  # [batch, channels, seq]
        x = op.Add(self.pointwise(op, x), self.bias)  # [batch, out, seq]
        return op.Transpose(x, perm=[0, 2, 1])


class ConvBertSelfAttention(nn.Module):
    def __init__(self, config: ConvBertConfig) -> None:
        super().__init__()
        hidden, heads, kernel = config.hidden_size, config.attention_heads, config.conv_kernel_size
        self.head_size = hidden // heads // 2
        inner = heads * self.head_size  # the attention heads' width; the conv heads' too
        self.query = Linear(hidden, inner, bias=True)
        self.key = Linear(hidden, inner, bias=True)
        self.value = Linear(hidden, inner, bias=True)
        self.key_conv_attn_layer = SeparableConv1D(hidden, inner, kernel)
        self.conv_kernel_layer = Linear(inner, heads * kernel, bias=True)
        self.conv_out_layer = Linear(hidden, inner, bias=True)
        self.heads, self.kernel = heads, kernel

    def forward(self, op, x, bias):
        q = self.query(op, x)  # [batch, seq, inner]
        k, v = self.key(op, x), self.value(op, x)
        attended = bidirectional_attention(op, q, k, v, bias, self.heads, self.head_size**-0.5)
        return op.Concat(attended, self.dynamic_convolution(op, x, q), axis=-1)

    def dynamic_convolution(self, op, x, q):
        """Each token's softmax kernel over its neighbours, applied to ``conv_out_layer(x)``."""
        shape = [0, 0, self.heads, self.kernel]
        kernel = op.Mul(self.key_conv_attn_layer(op, x), q)  # [batch, seq, inner]
        kernel = op.Softmax(op.Reshape(self.conv_kernel_layer(op, kernel), shape), axis=-1)
        spans = unfold(op, self.conv_out_layer(op, x), self.kernel)  # [batch, seq, inner, K]
        spans = op.Reshape(spans, [0, 0, self.heads, self.head_size, self.kernel])
        out = op.MatMul(spans, op.Unsqueeze(kernel, [-1]))  # [batch, seq, heads, d, 1]
        return op.Reshape(out, [0, 0, self.heads * self.head_size])


def unfold(op, x, kernel: int):
    """``[batch, seq, channels]`` -> ``[batch, seq, channels, kernel]``: each token's window, zero-padded."""
    half = (kernel - 1) // 2
    zero = op.CastLike(op.Constant(value=ir.tensor(np.array(0, np.float32))), x)
    padded = op.Pad(x, op.Constant(value_ints=[0, half, 0, 0, half, 0]), zero)
    seq = op.Shape(x, start=1, end=2)
    windows = [
        op.Unsqueeze(op.Slice(padded, [j], op.Add(seq, j), [1]), [-1]) for j in range(kernel)
    ]
    return op.Concat(*windows, axis=-1)


class GroupedLinear(nn.Module):
    """``num_groups`` independent Linears over equal slices of the features: ``weight [groups, in, out]``."""

    def __init__(self, in_features: int, out_features: int, groups: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([groups, in_features // groups, out_features // groups])
        self.bias = nn.Parameter([out_features])
        self.groups, self.out_features = groups, out_features

    def forward(self, op, x):
        parts = op.Reshape(x, op.Constant(value_ints=[-1, self.groups, self.weight.shape[1]]))
        y = op.MatMul(op.Transpose(parts, perm=[1, 0, 2]), self.weight)  # [groups, tokens, out/g]
        y = op.Transpose(y, perm=[1, 0, 2])
        shape = op.Concat(op.Shape(x, start=0, end=-1), [self.out_features], axis=0)
        return op.Add(op.Reshape(y, shape), self.bias)


class ConvBertLayer(BertLayer):
    """BERT's layer around the mixed attention, its feed-forward grouped with ``num_groups``."""

    def __init__(self, config: ConvBertConfig) -> None:
        super().__init__(config, BertAttention(config, ConvBertSelfAttention(config)))
        if config.num_groups > 1:
            hidden, inner = config.hidden_size, config.intermediate_size
            self.intermediate.dense = GroupedLinear(hidden, inner, config.num_groups)
            self.output.dense = GroupedLinear(inner, hidden, config.num_groups)


class ConvBertEncoder(BertEncoder):
    layer_class = ConvBertLayer


class ConvBertModel(ElectraModel):
    encoder_class = ConvBertEncoder


class ConvBertForFeatureExtraction(ElectraForFeatureExtraction):
    """The encoder and the head its config names (see :class:`mobius.config.EncoderConfig`)."""

    config_class = ConvBertConfig
    base_model_prefix = "convbert"
    model_class = ConvBertModel

    def sequence_classifier(self, config: ConvBertConfig) -> nn.Module:
        """ELECTRA's head with the config's activation instead of GELU."""
        return ClassificationHead(config.hidden_size, config.num_labels, config.hidden_act)


MODEL_TYPES = {"convbert": ConvBertForFeatureExtraction}
