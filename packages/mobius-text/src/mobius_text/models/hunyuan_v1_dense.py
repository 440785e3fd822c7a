"""Hunyuan V1 Dense: Llama with per-head RMSNorm of queries and keys *after* RoPE.

``query_layernorm`` / ``key_layernorm`` normalise each head once it is rotated.
A ``dynamic`` rope with an ``alpha`` is a fixed NTK stretch of the base,
``theta * alpha ** (head_dim / (head_dim - 2))``, independent of the sequence length.
"""

from __future__ import annotations

from dataclasses import dataclass

from mobius.components import (
    Attention,
    RMSNorm,
    RotaryEmbedding,
    apply_rotary,
    default_inv_freq,
    merge_heads,
    rotary_dim,
)
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class HunYuanDenseV1Config(LlamaConfig):
    ntk_alpha: float | None = None  # rope_parameters["alpha"] of a "dynamic" rope

    @classmethod
    def hf_fields(cls, hf_config):
        rope_parameters = hf_config.rope_parameters or {}
        alpha = rope_parameters.get("alpha")
        is_ntk_alpha = rope_parameters.get("rope_type") == "dynamic" and alpha
        return {
            **super().hf_fields(hf_config),
            "mlp_bias": False,  # Hunyuan MLPs have no biases
            "ntk_alpha": float(alpha) if is_ntk_alpha else None,
        }


class PostRopeQKNormAttention(Attention):
    """Attention whose rotated queries and keys are RMS-normalised per head."""

    def __init__(self, *args, eps: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.query_layernorm = RMSNorm(self.head_dim, eps)
        self.key_layernorm = RMSNorm(self.head_dim, eps)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)  # [batch, heads, seq, head_dim]
        cos, sin = position_embeddings
        q = self.query_layernorm(op, apply_rotary(op, q, cos, sin, self.rotary_dim))
        k = self.key_layernorm(op, apply_rotary(op, k, cos, sin, self.rotary_dim))
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        y = merge_heads(op, y)
        return self.o_proj(op, y), (present_key, present_value)


class HunYuanDenseV1Model(LlamaModel):
    def __init__(self, config: HunYuanDenseV1Config) -> None:
        super().__init__(config)
        if config.ntk_alpha is not None:
            dim = config.head_dim
            base = config.rope.theta * config.ntk_alpha ** (dim / (dim - 2))
            self.rotary_emb = RotaryEmbedding(default_inv_freq(base, dim))

    def make_attention(self, config, layer_idx):
        return PostRopeQKNormAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            eps=config.rms_norm_eps,
        )


class HunYuanDenseV1ForCausalLM(LlamaForCausalLM):
    """Hunyuan V1 Dense's causal LM: the Llama head over :class:`HunYuanDenseV1Model`."""

    config_class = HunYuanDenseV1Config
    model_class = HunYuanDenseV1Model


MODEL_TYPES = {"hunyuan_v1_dense": HunYuanDenseV1ForCausalLM}
