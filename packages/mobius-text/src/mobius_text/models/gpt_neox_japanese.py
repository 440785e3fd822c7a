"""GPT-NeoX-Japanese: GPT-NeoX's fused attention without biases, a sequential residual, an MLP
``intermediate_multiple_size`` times wider, and one stray bias: the last layer adds
``attention.dense_bias`` to its attention output."""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius_text.models.gpt_neox import (
    GPTNeoXAttention,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    GPTNeoXLayer,
    GPTNeoXMLP,
    GPTNeoXModel,
)


@dataclass
class GPTNeoXJapaneseConfig(GPTNeoXConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(
            intermediate_size=int(fields["hidden_size"] * hf_config.intermediate_multiple_size),
            use_parallel_residual=False,
            attention_bias=False,
        )
        return fields


class GPTNeoXJapaneseAttention(GPTNeoXAttention):
    """Bias-free projections; with ``dense_bias`` (the last layer) that vector is added after."""

    def __init__(self, config, dense_bias: bool) -> None:
        super().__init__(config, bias=False)
        self.dense_bias = nn.Parameter([config.hidden_size]) if dense_bias else None

    def project_out(self, op, y):
        y = super().project_out(op, y)
        return op.Add(y, self.dense_bias) if self.dense_bias is not None else y


class GPTNeoXJapaneseModel(GPTNeoXModel):
    def make_layer(self, config, layer_idx):
        last = layer_idx == config.num_hidden_layers - 1
        return GPTNeoXLayer(
            GPTNeoXJapaneseAttention(config, dense_bias=last),
            GPTNeoXMLP(config.hidden_size, config.intermediate_size, config.hidden_act, bias=False),
            config,
        )


class GPTNeoXJapaneseForCausalLM(GPTNeoXForCausalLM):
    config_class = GPTNeoXJapaneseConfig
    model_class = GPTNeoXJapaneseModel
    backbone_name = "gpt_neox_japanese"


MODEL_TYPES = {"gpt_neox_japanese": GPTNeoXJapaneseForCausalLM}
