"""Hy3 (HF ``hy_v3``): Llama with per-head q/k RMS norms and sigmoid-routed experts.

The MoE block (the layers ``mlp_layer_types`` marks "sparse") chooses its top-k
experts on ``sigmoid(logits) + expert_bias``, weights them by the unbiased scores
renormalised to sum 1, times ``router_scaling_factor``, and adds a shared gated MLP.
Checkpoint names: ``mlp.router.gate``, ``mlp.expert_bias``, ``mlp.shared_mlp``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx_ir as ir
from onnxscript import nn

from mobius.components import DecoderLayer, GatedMLP, RMSNorm, rotary_dim
from mobius.components.moe import ExpertList, flatten_tokens, top_k_routing, unflatten_tokens
from mobius.config import ArchitectureConfig
from mobius_text.models.afmoe import AfmoeTokenChoiceRouter
from mobius_text.models.llama import LlamaForCausalLM, LlamaModel
from mobius_text.models.qwen import QKNormAttention


@dataclass
class HYV3Config(ArchitectureConfig):
    """Llama fields plus the dense/MoE layout and routing constants."""

    mlp_layer_types: list[str] = field(default_factory=list)
    num_experts: int = 0
    num_experts_per_tok: int = 0
    num_shared_experts: int = 0
    moe_intermediate_size: int = 0
    router_scaling_factor: float = 1.0

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "mlp_layer_types": list(hf_config.mlp_layer_types),
            "num_experts": hf_config.num_experts,
            "num_experts_per_tok": hf_config.num_experts_per_tok,
            "num_shared_experts": hf_config.num_shared_experts,
            "moe_intermediate_size": hf_config.moe_intermediate_size,
            "router_scaling_factor": float(hf_config.router_scaling_factor),
        }


class HYV3MoE(nn.Module):
    """Sigmoid-routed experts (``expert_bias`` steers the choice only) plus ``shared_mlp``."""

    def __init__(self, config: HYV3Config) -> None:
        super().__init__()
        hidden, inter, act = config.hidden_size, config.moe_intermediate_size, config.hidden_act
        self.router = AfmoeTokenChoiceRouter(hidden, config.num_experts)
        self.expert_bias = nn.Parameter([config.num_experts])
        self.experts = ExpertList([GatedMLP(hidden, inter, act) for _ in range(config.num_experts)])
        self.shared_mlp = GatedMLP(hidden, inter * config.num_shared_experts, act, config.mlp_bias)
        self.top_k, self.scale, self.hidden = (
            config.num_experts_per_tok,
            config.router_scaling_factor,
            hidden,
        )

    def forward(self, op, x: ir.Value) -> ir.Value:
        flat = flatten_tokens(op, x, self.hidden)  # [tokens, hidden]
        # HF adds 1e-20 to the sum of the chosen sigmoid scores: a no-op at float32.
        routing = top_k_routing(
            op, self.router(op, flat), self.top_k, scoring="sigmoid", choice_bias=self.expert_bias
        )
        routing = op.Mul(routing, self.scale)  # [tokens, experts], zero off the top-k
        out = op.Add(self.experts.dispatch(op, flat, routing), self.shared_mlp(op, flat))
        return unflatten_tokens(op, out, x)


class HYV3Model(LlamaModel):
    """Q/K-normed attention; a dense MLP or the MoE block per ``mlp_layer_types``."""

    def make_layer(self, config, layer_idx):
        if config.mlp_layer_types[layer_idx] == "sparse":
            mlp = HYV3MoE(config)
        else:
            mlp = GatedMLP(
                config.hidden_size, config.intermediate_size, config.hidden_act, config.mlp_bias
            )
        attention = QKNormAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            eps=config.rms_norm_eps,
        )
        return DecoderLayer(
            self_attn=attention,
            mlp=mlp,
            input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class HYV3ForCausalLM(LlamaForCausalLM):
    """Hy3 causal LM (HF ``HYV3ForCausalLM``)."""

    config_class = HYV3Config
    model_class = HYV3Model


MODEL_TYPES = {"hy_v3": HYV3ForCausalLM}
