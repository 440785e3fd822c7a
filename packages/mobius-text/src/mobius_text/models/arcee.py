"""Arcee (AFM): Llama with a non-gated ``down(relu²(up(x)))`` MLP (Nemotron's block)."""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components import DecoderLayer, Linear, RMSNorm, get_activation
from mobius_text.models.llama import LlamaForCausalLM, LlamaModel


class UpDownMLP(nn.Module):
    """``down_proj(act(up_proj(x)))``: no gate projection (HF ``NemotronMLP``)."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str, bias: bool) -> None:
        super().__init__()
        self.up_proj = Linear(hidden_size, intermediate_size, bias)
        self.down_proj = Linear(intermediate_size, hidden_size, bias)
        self.act = get_activation(act)

    def forward(self, op, x: ir.Value) -> ir.Value:
        return self.down_proj(op, self.act(op, self.up_proj(op, x)))


class ArceeModel(LlamaModel):
    def make_layer(self, config, layer_idx):
        return DecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=UpDownMLP(
                config.hidden_size, config.intermediate_size, config.hidden_act, config.mlp_bias
            ),
            input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class ArceeForCausalLM(LlamaForCausalLM):
    """Arcee's causal LM: the Llama head over :class:`ArceeModel`."""

    model_class = ArceeModel


MODEL_TYPES = {"arcee": ArceeForCausalLM}
