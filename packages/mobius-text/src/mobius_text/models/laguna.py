"""Laguna: qk-normed GQA with softplus output gates, per-layer head counts, and
sigmoid-routed experts plus a shared expert.

What differs from Qwen2-MoE:

- each layer has its own query-head count (``num_attention_heads_per_layer``; the
  KV heads are shared by all layers); queries and keys are RMS-normalised per head;
- the attention output is scaled by ``softplus(g_proj(x))``, one gate per head
  (``gating`` true / ``"per-head"``) or per channel (``"per-element"``);
- RoPE settings per layer type (full layers default to a partial rotation);
- routing: ``sigmoid(logits)`` (optionally soft-capped logits first), experts chosen
  on ``score + e_score_correction_bias``, weights renormalised; the routed sum is
  scaled by ``moe_routed_scaling_factor`` and the shared expert (ungated) added.

Checkpoints keep the correction bias under ``mlp.experts`` (transformers moves it to
the router on load); it is renamed onto the router here as well.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    DecoderLayer,
    GatedMLP,
    Linear,
    RMSNorm,
    TransposedParameter,
    rotary_dim,
    softcap,
)
from mobius.components.moe import ExpertList, flatten_tokens, top_k_routing, unflatten_tokens
from mobius.config import ArchitectureConfig, RopeConfig
from mobius_text.models._rope_by_type import RotaryByLayerType, rope_by_layer_type_fields
from mobius_text.models.llama import LlamaForCausalLM, LlamaModel
from mobius_text.models.qwen import QKNormAttention


@dataclass
class LagunaConfig(ArchitectureConfig):
    """Per-layer head counts, gate granularity, RoPE per layer type and MoE settings."""

    num_attention_heads_per_layer: list[int] = field(default_factory=list)
    gate_per_head: bool = True
    rope_by_layer_type: dict[str, RopeConfig] = field(default_factory=dict)
    mlp_layer_types: list[str] = field(default_factory=list)
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    moe_routed_scaling_factor: float = 1.0
    moe_router_logit_softcapping: float = 0.0

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(
            **rope_by_layer_type_fields(hf_config, fields["layer_types"]),
            num_attention_heads_per_layer=list(hf_config.num_attention_heads_per_layer),
            gate_per_head=hf_config.gating is True or hf_config.gating == "per-head",
            mlp_layer_types=list(hf_config.mlp_layer_types),
            num_experts=hf_config.num_experts,
            num_experts_per_tok=hf_config.num_experts_per_tok,
            moe_intermediate_size=hf_config.moe_intermediate_size,
            shared_expert_intermediate_size=hf_config.shared_expert_intermediate_size,
            moe_routed_scaling_factor=float(hf_config.moe_routed_scaling_factor),
            moe_router_logit_softcapping=float(hf_config.moe_router_logit_softcapping or 0.0),
        )
        return fields


class LagunaAttention(QKNormAttention):
    """QK-normed attention whose output is scaled by ``softplus(g_proj(x))`` per head or channel."""

    def __init__(self, config: LagunaConfig, layer_idx: int) -> None:
        num_heads = config.num_attention_heads_per_layer[layer_idx]
        rope = config.rope_by_layer_type[config.layer_types[layer_idx]]
        super().__init__(
            config.hidden_size,
            num_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(rope, config.head_dim),
            eps=config.rms_norm_eps,
        )
        self.gate_per_head = config.gate_per_head
        width = num_heads if self.gate_per_head else num_heads * config.head_dim
        self.g_proj = Linear(config.hidden_size, width)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)  # [batch, heads, seq, head_dim]
        cos, sin = (op.CastLike(t, q) for t in position_embeddings)
        q = op.RotaryEmbedding(q, cos, sin, interleaved=0, rotary_embedding_dim=self.rotary_dim)
        k = op.RotaryEmbedding(k, cos, sin, interleaved=0, rotary_embedding_dim=self.rotary_dim)
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        y = op.Transpose(y, perm=[0, 2, 1, 3])  # [batch, seq, heads, head_dim]
        gate = op.Softplus(self.g_proj(op, x))
        if self.gate_per_head:
            y = op.Mul(y, op.Unsqueeze(gate, [-1]))  # gate [batch, seq, heads, 1]
            y = op.Reshape(y, op.Constant(value_ints=[0, 0, -1]))
        else:
            y = op.Mul(op.Reshape(y, op.Constant(value_ints=[0, 0, -1])), gate)
        return self.o_proj(op, y), (present_key, present_value)


class LagunaRouter(nn.Module):
    """Sigmoid top-k routing, chosen on ``score + e_score_correction_bias``, renormalised."""

    def __init__(self, config: LagunaConfig) -> None:
        super().__init__()
        self.weight = TransposedParameter(config.num_experts, config.hidden_size)
        self.e_score_correction_bias = nn.Parameter([config.num_experts])
        self.top_k = config.num_experts_per_tok
        self.logit_softcap = config.moe_router_logit_softcapping

    def forward(self, op, x: ir.Value) -> ir.Value:
        logits = op.Cast(op.MatMul(x, self.weight), to=ir.DataType.FLOAT)  # [tokens, experts]
        if self.logit_softcap > 0.0:
            logits = softcap(op, logits, self.logit_softcap)
        return top_k_routing(
            op, logits, self.top_k, scoring="sigmoid", choice_bias=self.e_score_correction_bias
        )


class LagunaSparseMoeBlock(nn.Module):
    """``moe_routed_scaling_factor * routed experts + shared_expert``."""

    def __init__(self, config: LagunaConfig) -> None:
        super().__init__()
        hidden, act = config.hidden_size, config.hidden_act
        self.gate = LagunaRouter(config)
        self.experts = ExpertList(
            [GatedMLP(hidden, config.moe_intermediate_size, act) for _ in range(config.num_experts)]
        )
        self.shared_expert = GatedMLP(hidden, config.shared_expert_intermediate_size, act)
        self.scale, self.hidden = config.moe_routed_scaling_factor, hidden

    def forward(self, op, x: ir.Value) -> ir.Value:
        flat = flatten_tokens(op, x, self.hidden)  # [tokens, hidden]
        routed = self.experts.dispatch(op, flat, self.gate(op, flat))
        out = op.Add(op.Mul(routed, self.scale), self.shared_expert(op, flat))
        return unflatten_tokens(op, out, x)


class LagunaModel(RotaryByLayerType, LlamaModel):
    """RoPE and masks per layer type (sliding or full)."""

    def __init__(self, config: LagunaConfig) -> None:
        super().__init__(config)
        self.make_rotary_by_layer_type(config)

    def make_attention(self, config, layer_idx):
        return LagunaAttention(config, layer_idx)

    def make_moe(self, config) -> nn.Module:
        return LagunaSparseMoeBlock(config)

    def make_layer(self, config, layer_idx):
        if config.mlp_layer_types[layer_idx] == "sparse":
            mlp = self.make_moe(config)
        else:
            mlp = GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
        return DecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=mlp,
            input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class LagunaForCausalLM(LlamaForCausalLM):
    """Laguna causal LM (HF ``LagunaForCausalLM``)."""

    config_class = LagunaConfig
    model_class = LagunaModel

    def sanitize(self, weights: dict) -> dict:
        """The correction bias is stored under ``mlp.experts``; the router owns it here."""
        for name in [n for n in weights if n.endswith("mlp.experts.e_score_correction_bias")]:
            weights[name.replace(".experts.", ".gate.")] = weights.pop(name)
        return super().sanitize(weights)


MODEL_TYPES = {"laguna": LagunaForCausalLM}
