"""Qwen2 (biased q/k/v projections) and Qwen3 (RMS-normalised queries and keys per head)."""

from __future__ import annotations

from dataclasses import dataclass

from mobius.components import Attention, RMSNorm, rotary_dim
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class QwenConfig(LlamaConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        return {**super().hf_fields(hf_config), "mlp_bias": False}  # Qwen MLPs have no biases


class Qwen2Model(LlamaModel):
    def make_attention(self, config, layer_idx):
        return Attention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=True,  # q, k and v always carry biases; o_proj never does
            out_bias=False,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
        )


class Qwen2ForCausalLM(LlamaForCausalLM):
    config_class = QwenConfig
    model_class = Qwen2Model


class QKNormAttention(Attention):
    """Attention whose queries and keys are RMS-normalised per head before RoPE."""

    def __init__(self, *args, eps: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.q_norm = RMSNorm(self.head_dim, eps)
        self.k_norm = RMSNorm(self.head_dim, eps)

    def project_qkv(self, op, x):
        q, k, v = super().project_qkv(op, x)  # [batch, heads, seq, head_dim]
        return self.q_norm(op, q), self.k_norm(op, k), v


class Qwen3Model(LlamaModel):
    def make_attention(self, config, layer_idx):
        return QKNormAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            eps=config.rms_norm_eps,
        )


class Qwen3ForCausalLM(LlamaForCausalLM):
    config_class = QwenConfig
    model_class = Qwen3Model


MODEL_TYPES = {"qwen2": Qwen2ForCausalLM, "qwen3": Qwen3ForCausalLM}
