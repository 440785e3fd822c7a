"""GPT-Neo: GPT-2's layout with separate q/k/v projections, unscaled attention scores, and
layers alternating between global attention and local attention over a ``window_size``."""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import Linear
from mobius_text.models._gpt_common import GPTForCausalLM, QKVOutAttention
from mobius_text.models.gpt2 import GPT2MLP, GPT2Config, GPT2Model

_LAYER_TYPES = {"global": "full_attention", "local": "sliding_attention"}


@dataclass
class GPTNeoConfig(GPT2Config):
    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(
            intermediate_size=hf_config.intermediate_size or 4 * fields["hidden_size"],
            scale_attn_weights=False,  # GPT-Neo never scales q·k
            # Local layers see the last window_size positions, the query included.
            sliding_window=hf_config.window_size,
            layer_types=[_LAYER_TYPES[kind] for kind in hf_config.attention_layers],
        )
        return fields


class GPTNeoAttention(nn.Module):
    """HF nests the attention one level deeper (``attn.attention.q_proj``)."""

    def __init__(self, config: GPTNeoConfig) -> None:
        super().__init__()
        self.attention = QKVOutAttention(
            config.hidden_size, config.num_attention_heads, scale=1.0, bias=False, out_bias=True
        )

    def forward(self, op, *args):
        return self.attention(op, *args)


class GPTNeoModel(GPT2Model):
    def make_attention(self, config, layer_idx):
        return GPTNeoAttention(config)

    def make_mlp(self, config):
        hidden, inner = config.hidden_size, config.intermediate_size
        return GPT2MLP(
            Linear(hidden, inner, bias=True), Linear(inner, hidden, bias=True), config.hidden_act
        )


class GPTNeoForCausalLM(GPTForCausalLM):
    config_class = GPTNeoConfig
    model_class = GPTNeoModel
    # Causal/local-mask buffers that older checkpoints saved with the weights.
    ignored = ("*.attn.attention.bias", "*.attn.attention.masked_bias")


MODEL_TYPES = {"gpt_neo": GPTNeoForCausalLM}
