"""Phi-3/Phi-4-mini: Llama with fused ``qkv_proj`` and ``gate_up_proj``, LongRoPE, optional sliding window.

The fused checkpoint tensors stay single ``Linear`` layers; the graph splits
their outputs, so the weight mapping is the identity.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import (
    Attention,
    DecoderLayer,
    GatedMLP,
    Linear,
    RMSNorm,
    get_activation,
    rotary_dim,
)
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class Phi3Config(LlamaConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        # Phi-3's projections take no bias flags: stray config keys must not add any.
        return {**super().hf_fields(hf_config), "attention_bias": False, "mlp_bias": False}


class Phi3Attention(Attention):
    """``qkv_proj`` output ``[q | k | v]`` split in the graph; output ``o_proj``."""

    def __init__(self, config: Phi3Config) -> None:
        nn.Module.__init__(self)  # no separate q/k/v projections: the checkpoint fuses them
        heads, kv_heads, head_dim = (
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
        )
        self.qkv_proj = Linear(config.hidden_size, (heads + 2 * kv_heads) * head_dim)
        self.o_proj = Linear(heads * head_dim, config.hidden_size)
        self.num_heads, self.num_kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.rotary_dim = rotary_dim(config.rope, head_dim)
        self.scale = head_dim**-0.5

    def project_qkv(self, op, x):
        sizes = [self.num_heads * self.head_dim] + [self.num_kv_heads * self.head_dim] * 2
        qkv = self.qkv_proj(op, x)
        q, k, v = op.Split(qkv, op.Constant(value_ints=sizes), axis=-1, _outputs=3)
        return self.split_heads(op, q), self.split_heads(op, k), self.split_heads(op, v)


class Phi3MLP(GatedMLP):
    """``down_proj(up * act(gate))`` with ``gate_up_proj`` output ``[gate | up]``."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str) -> None:
        nn.Module.__init__(self)
        self.gate_up_proj = Linear(hidden_size, 2 * intermediate_size)
        self.down_proj = Linear(intermediate_size, hidden_size)
        self.act = get_activation(act)

    def forward(self, op, x):
        gate, up = op.Split(self.gate_up_proj(op, x), axis=-1, num_outputs=2, _outputs=2)
        return self.down_proj(op, op.Mul(up, self.act(op, gate)))


class Phi3Model(LlamaModel):
    def make_attention(self, config: Phi3Config, layer_idx: int) -> Attention:
        return Phi3Attention(config)

    def make_layer(self, config: Phi3Config, layer_idx: int):
        hidden, eps = config.hidden_size, config.rms_norm_eps
        return DecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=Phi3MLP(hidden, config.intermediate_size, config.hidden_act),
            input_layernorm=RMSNorm(hidden, eps),
            post_attention_layernorm=RMSNorm(hidden, eps),
        )


class Phi3ForCausalLM(LlamaForCausalLM):
    config_class = Phi3Config
    model_class = Phi3Model


MODEL_TYPES = {"phi3": Phi3ForCausalLM}
