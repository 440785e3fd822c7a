"""SqueezeBERT: BERT with every position-wise projection a grouped 1x1 convolution.

Queries, keys, values, the attention output, the intermediate and the output
projections are ``Conv1d(kernel_size=1, groups)`` with the config's group counts
(``q_groups``...): ONNX ``Conv`` on the channels-first states, the checkpoint's
``weight [cout, cin / groups, 1]`` as it is. The states between them stay
``[batch, seq, hidden]``. Each block's LayerNorm uses eps 1e-12 whatever
``layer_norm_eps`` says (transformers' ``SqueezeBertLayerNorm`` default; only the
embeddings read the config's). Embeddings, pooler and heads are BERT's. The
module tree follows ``SqueezeBertFor*`` checkpoints (``transformer.*``,
``cls.*``, ``classifier``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, bidirectional_attention, get_activation
from mobius.errors import ConfigError
from mobius_text.models.bert import BertConfig, BertForFeatureExtraction, BertModel

BLOCK_NORM_EPS = 1e-12  # SqueezeBertLayerNorm's default; transformers never passes the config's


@dataclass
class SqueezeBertConfig(BertConfig):
    q_groups: int = 4
    k_groups: int = 4
    v_groups: int = 4
    post_attention_groups: int = 1
    intermediate_groups: int = 4
    output_groups: int = 4

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        if hf_config.embedding_size != fields["hidden_size"]:
            raise ConfigError(
                f"SqueezeBERT embedding_size {hf_config.embedding_size} != hidden_size "
                f"{fields['hidden_size']}: transformers has no projection between them either"
            )
        groups = ("q", "k", "v", "post_attention", "intermediate", "output")
        return dict(
            fields, **{f"{g}_groups": int(getattr(hf_config, f"{g}_groups")) for g in groups}
        )


class Conv1x1(nn.Module):
    """``Conv1d(kernel_size=1, groups)`` of ``x [batch, seq, cin]``, transposed around ONNX ``Conv``."""

    def __init__(self, cin: int, cout: int, groups: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([cout, cin // groups, 1])
        self.bias = nn.Parameter([cout])
        self.groups = groups

    def forward(self, op, x):
        x = op.Transpose(x, perm=[0, 2, 1])  # [batch, cin, seq]
        y = op.Conv(x, self.weight, self.bias, kernel_shape=[1], group=self.groups)
        return op.Transpose(y, perm=[0, 2, 1])


class SqueezeBertSelfAttention(nn.Module):
    def __init__(self, config: SqueezeBertConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.query = Conv1x1(hidden, hidden, config.q_groups)
        self.key = Conv1x1(hidden, hidden, config.k_groups)
        self.value = Conv1x1(hidden, hidden, config.v_groups)
        self.num_heads, self.scale = config.num_attention_heads, config.head_dim**-0.5

    def forward(self, op, x, bias):
        q, k, v = self.query(op, x), self.key(op, x), self.value(op, x)
        return bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)


class ConvDropoutLayerNorm(nn.Module):
    """``layernorm(conv1d(x) + residual)``."""

    def __init__(self, cin: int, cout: int, groups: int) -> None:
        super().__init__()
        self.conv1d = Conv1x1(cin, cout, groups)
        self.layernorm = LayerNorm(cout, BLOCK_NORM_EPS)

    def forward(self, op, x, residual):
        return self.layernorm(op, op.Add(self.conv1d(op, x), residual))


class ConvActivation(nn.Module):
    def __init__(self, cin: int, cout: int, groups: int, act: str) -> None:
        super().__init__()
        self.conv1d = Conv1x1(cin, cout, groups)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.act(op, self.conv1d(op, x))


class SqueezeBertModule(nn.Module):
    """One post-norm layer: attention, then the feed-forward block."""

    def __init__(self, config: SqueezeBertConfig) -> None:
        super().__init__()
        hidden, inner = config.hidden_size, config.intermediate_size
        self.attention = SqueezeBertSelfAttention(config)
        self.post_attention = ConvDropoutLayerNorm(hidden, hidden, config.post_attention_groups)
        self.intermediate = ConvActivation(
            hidden, inner, config.intermediate_groups, config.hidden_act
        )
        self.output = ConvDropoutLayerNorm(inner, hidden, config.output_groups)

    def forward(self, op, x, bias):
        x = self.post_attention(op, self.attention(op, x, bias), x)
        return self.output(op, self.intermediate(op, x), x)


class SqueezeBertEncoder(nn.Module):
    def __init__(self, config: SqueezeBertConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [SqueezeBertModule(config) for _ in range(config.num_hidden_layers)]
        )

    def forward(self, op, x, bias):
        for layer in self.layers:
            x = layer(op, x, bias)
        return x


class SqueezeBertModel(BertModel):
    encoder_class = SqueezeBertEncoder


class SqueezeBertForFeatureExtraction(BertForFeatureExtraction):
    """BERT's heads on the SqueezeBERT encoder (``transformer.*``)."""

    config_class = SqueezeBertConfig
    base_model_prefix = "transformer"
    model_class = SqueezeBertModel


MODEL_TYPES = {"squeezebert": SqueezeBertForFeatureExtraction}
