"""Sarvam-MoE (sarvam-30b): GLM-4-MoE under its original checkpoint names.

transformers builds it with the GLM-4-MoE classes (q/k norm on, full-head RoPE)
and saves it with the original names, which the graph keeps: ``word_embeddings``,
``attention.query_key_value`` (one fused ``[q | k | v]`` projection, split in the
graph), ``attention.dense``, ``attention.query_layernorm`` / ``key_layernorm`` and
the router's ``gate.expert_bias``.
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components import Attention, Linear, RMSNorm, rotary_dim
from mobius_text.models.deepseek_v2 import DeepseekV2MoE, DeepseekV2Router
from mobius_text.models.glm4_moe import Glm4MoeConfig, Glm4MoeForCausalLM, Glm4MoeModel


def named(module: nn.Module, name: str) -> nn.Module:
    """Give ``module`` the checkpoint's name before the shared code assigns it to its own slot."""
    module._set_name(name)
    return module


class FusedQKVAttention(Attention):
    """GQA attention with one ``query_key_value`` projection and per-head q/k RMSNorm before RoPE."""

    def __init__(self, hidden_size, num_heads, num_kv_heads, head_dim, bias, rotary_dim, eps):
        nn.Module.__init__(self)  # not Attention's: the projections are named differently
        self.query_key_value = Linear(hidden_size, (num_heads + 2 * num_kv_heads) * head_dim, bias)
        self.o_proj = named(Linear(num_heads * head_dim, hidden_size), "dense")
        self.query_layernorm = RMSNorm(head_dim, eps)
        self.key_layernorm = RMSNorm(head_dim, eps)
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.rotary_dim, self.scale = rotary_dim, head_dim**-0.5

    def project_qkv(self, op, x):
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        q, k, v = op.Split(
            self.query_key_value(op, x), [q_size, kv_size, kv_size], axis=-1, _outputs=3
        )
        q = self.query_layernorm(op, self.split_heads(op, q))
        k = self.key_layernorm(op, self.split_heads(op, k))
        return q, k, self.split_heads(op, v)


class SarvamMoERouter(DeepseekV2Router):
    def __init__(self, config) -> None:
        super().__init__(config)
        self.e_score_correction_bias = nn.Parameter([config.n_routed_experts], name="expert_bias")


class SarvamMoESparseBlock(DeepseekV2MoE):
    def __init__(self, config) -> None:
        super().__init__(config)
        self.gate = SarvamMoERouter(config)


class SarvamMoEModel(Glm4MoeModel):
    def __init__(self, config: Glm4MoeConfig) -> None:
        super().__init__(config)
        named(self.embed_tokens, "word_embeddings")

    def make_attention(self, config, layer_idx):
        attention = FusedQKVAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            eps=config.rms_norm_eps,
        )
        return named(attention, "attention")

    def make_mlp(self, config, layer_idx):
        if config.mlp_layer_types[layer_idx] == "sparse":
            return SarvamMoESparseBlock(config)
        return super().make_mlp(config, layer_idx)


class SarvamMoEForCausalLM(Glm4MoeForCausalLM):
    model_class = SarvamMoEModel


MODEL_TYPES = {"sarvam_moe": SarvamMoEForCausalLM}
