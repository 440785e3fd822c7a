"""Nemotron: LayerNorm1P (weights stored as ``weight - 1``), a non-gated relu² MLP, partial RoPE."""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import DecoderLayer, LayerNorm, Linear, get_activation
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class NemotronConfig(LlamaConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        return {**super().hf_fields(hf_config), "rms_norm_eps": hf_config.norm_eps}


class LayerNorm1P(LayerNorm):
    """LayerNorm whose checkpoint weight is zero-centred: the scale applied is ``weight + 1``."""

    def forward(self, op, x):
        scale = op.Add(self.weight, 1.0)
        return op.LayerNormalization(x, scale, self.bias, axis=-1, epsilon=self.eps, stash_type=1)


class NemotronMLP(nn.Module):
    """``down_proj(act(up_proj(x)))``: no gate."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str, bias: bool) -> None:
        super().__init__()
        self.up_proj = Linear(hidden_size, intermediate_size, bias)
        self.down_proj = Linear(intermediate_size, hidden_size, bias)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.down_proj(op, self.act(op, self.up_proj(op, x)))


class NemotronModel(LlamaModel):
    def __init__(self, config: NemotronConfig) -> None:
        super().__init__(config)
        self.norm = LayerNorm1P(config.hidden_size, config.rms_norm_eps)

    def make_layer(self, config: NemotronConfig, layer_idx: int) -> DecoderLayer:
        hidden, eps = config.hidden_size, config.rms_norm_eps
        return DecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=NemotronMLP(hidden, config.intermediate_size, config.hidden_act, config.mlp_bias),
            input_layernorm=LayerNorm1P(hidden, eps),
            post_attention_layernorm=LayerNorm1P(hidden, eps),
        )


class NemotronForCausalLM(LlamaForCausalLM):
    config_class = NemotronConfig
    model_class = NemotronModel


MODEL_TYPES = {"nemotron": NemotronForCausalLM}
