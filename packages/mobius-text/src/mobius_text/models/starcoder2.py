"""StarCoder2: a LayerNorm decoder with biases (``use_bias``), a plain GELU MLP and sliding-window attention."""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import Attention, DecoderLayer, LayerNorm, Linear, get_activation, rotary_dim
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class Starcoder2Config(LlamaConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        use_bias = bool(hf_config.use_bias)
        return {
            **super().hf_fields(hf_config),
            "rms_norm_eps": hf_config.norm_epsilon,
            "attention_bias": use_bias,
            "mlp_bias": use_bias,
        }


class Starcoder2MLP(nn.Module):
    """``c_proj(act(c_fc(x)))``."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str, bias: bool) -> None:
        super().__init__()
        self.c_fc = Linear(hidden_size, intermediate_size, bias)
        self.c_proj = Linear(intermediate_size, hidden_size, bias)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.c_proj(op, self.act(op, self.c_fc(op, x)))


class Starcoder2Model(LlamaModel):
    def __init__(self, config: Starcoder2Config) -> None:
        super().__init__(config)
        self.norm = LayerNorm(config.hidden_size, config.rms_norm_eps)

    def make_layer(self, config: Starcoder2Config, layer_idx: int) -> DecoderLayer:
        hidden, eps = config.hidden_size, config.rms_norm_eps
        return DecoderLayer(
            self_attn=Attention(
                hidden,
                config.num_attention_heads,
                config.num_key_value_heads,
                config.head_dim,
                bias=config.attention_bias,
                out_bias=config.attention_bias,
                rotary_dim=rotary_dim(config.rope, config.head_dim),
            ),
            mlp=Starcoder2MLP(hidden, config.intermediate_size, config.hidden_act, config.mlp_bias),
            input_layernorm=LayerNorm(hidden, eps),
            post_attention_layernorm=LayerNorm(hidden, eps),
        )


class Starcoder2ForCausalLM(LlamaForCausalLM):
    config_class = Starcoder2Config
    model_class = Starcoder2Model


MODEL_TYPES = {"starcoder2": Starcoder2ForCausalLM}
