"""OLMoE: routed experts after attention whose q/k are RMS-normalised across all heads.

The query and key norms span the whole projection (``heads * head_dim``), not one
head, and are applied before the heads are split; ``clip_qkv`` then clamps q, k, v.
"""

from __future__ import annotations

from dataclasses import dataclass

from mobius.components import Attention, DecoderLayer, GatedMLP, RMSNorm, rotary_dim
from mobius.components.moe import ExpertList, TopKRouter
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel
from mobius_text.models.mixtral import SparseMoeBlock


@dataclass
class OlmoeConfig(LlamaConfig):
    num_experts: int = 64
    num_experts_per_tok: int = 8
    norm_topk_prob: bool = False
    clip_qkv: float | None = None

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "mlp_bias": False,
            "num_experts": hf_config.num_experts,
            "num_experts_per_tok": hf_config.num_experts_per_tok,
            "norm_topk_prob": bool(hf_config.norm_topk_prob),
            "clip_qkv": getattr(hf_config, "clip_qkv", None),
        }


class FullWidthQKNormAttention(Attention):
    """q/k RMS norms over the full ``heads * head_dim`` projection, then optional clamping."""

    def __init__(self, *args, eps: float, clip_qkv: float | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.q_norm = RMSNorm(self.num_heads * self.head_dim, eps)
        self.k_norm = RMSNorm(self.num_kv_heads * self.head_dim, eps)
        self.clip_qkv = clip_qkv

    def project_qkv(self, op, x):
        q = self.q_norm(op, self.q_proj(op, x))  # [batch, seq, heads*head_dim]
        k = self.k_norm(op, self.k_proj(op, x))
        v = self.v_proj(op, x)
        if self.clip_qkv is not None:
            low, high = op.CastLike(-self.clip_qkv, x), op.CastLike(self.clip_qkv, x)
            q, k, v = (op.Clip(t, low, high) for t in (q, k, v))
        return self.split_heads(op, q), self.split_heads(op, k), self.split_heads(op, v)


def make_olmoe_moe(config: OlmoeConfig) -> SparseMoeBlock:
    router = TopKRouter(
        config.hidden_size,
        config.num_experts,
        config.num_experts_per_tok,
        normalize=config.norm_topk_prob,
    )
    experts = ExpertList(
        [
            GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
            for _ in range(config.num_experts)
        ]
    )
    return SparseMoeBlock(router, experts, config.hidden_size)


class OlmoeModel(LlamaModel):
    def make_attention(self, config, layer_idx):
        return FullWidthQKNormAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            eps=config.rms_norm_eps,
            clip_qkv=config.clip_qkv,
        )

    def make_layer(self, config, layer_idx):
        return DecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=make_olmoe_moe(config),
            input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class OlmoeForCausalLM(LlamaForCausalLM):
    config_class = OlmoeConfig
    model_class = OlmoeModel


MODEL_TYPES = {"olmoe": OlmoeForCausalLM}
