"""Granite-MoE (and Granite-MoE-Shared): Granite's µP multipliers around a stacked-expert MoE.

Experts are stored stacked, ``block_sparse_moe.input_linear.weight [E, 2*inter, hidden]``
(gate rows first) and ``output_linear.weight [E, hidden, inter]``; the router
``router.layer`` takes the top-k logits and softmaxes over those k. Granite-MoE-Shared
adds a dense gated ``shared_mlp`` (fused ``input_linear``) beside the routed experts.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import Linear, RMSNorm, get_activation
from mobius.components.moe import (
    StackedLinear,
    dispatch_experts,
    flatten_tokens,
    gated,
    top_k_routing,
    unflatten_tokens,
)
from mobius_text.models.granite import (
    GraniteConfig,
    GraniteForCausalLM,
    GraniteModel,
    ScaledResidualDecoderLayer,
)


@dataclass
class GraniteMoeConfig(GraniteConfig):
    num_local_experts: int = 8
    num_experts_per_tok: int = 2
    shared_intermediate_size: int = 0

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(
            sliding_window=None,  # Granite-MoE always uses a full causal mask
            layer_types=[],
            mlp_bias=False,
            num_local_experts=hf_config.num_local_experts,
            num_experts_per_tok=hf_config.num_experts_per_tok,
            shared_intermediate_size=getattr(hf_config, "shared_intermediate_size", 0) or 0,
        )
        return fields


class GraniteRouter(nn.Module):
    """``layer [experts, hidden]``: softmax over each token's top-k logits."""

    def __init__(self, hidden_size: int, num_experts: int, top_k: int) -> None:
        super().__init__()
        self.layer = Linear(hidden_size, num_experts)
        self.top_k = top_k

    def forward(self, op, x):
        return top_k_routing(op, self.layer(op, x), self.top_k, softmax_first=False)


class GraniteMoeBlock(nn.Module):
    """Routed experts with stacked ``input_linear`` / ``output_linear`` weights."""

    def __init__(self, config: GraniteMoeConfig, intermediate_size: int) -> None:
        super().__init__()
        experts = config.num_local_experts
        self.router = GraniteRouter(config.hidden_size, experts, config.num_experts_per_tok)
        self.input_linear = StackedLinear(experts, config.hidden_size, 2 * intermediate_size)
        self.output_linear = StackedLinear(experts, intermediate_size, config.hidden_size)
        self.act = get_activation(config.hidden_act)
        self.hidden_size, self.num_experts = config.hidden_size, experts

    def expert(self, op, e: int, rows):
        return self.output_linear(op, gated(op, self.act, self.input_linear(op, rows, e)), e)

    def forward(self, op, x):
        tokens = flatten_tokens(op, x, self.hidden_size)  # [batch*seq, hidden]
        experts = [lambda op, rows, e=e: self.expert(op, e, rows) for e in range(self.num_experts)]
        y = dispatch_experts(op, tokens, self.router(op, tokens), experts)
        return unflatten_tokens(op, y, x)


class GraniteSharedMLP(nn.Module):
    """``output_linear(act(gate) * up)`` with gate and up fused in ``input_linear``."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str) -> None:
        super().__init__()
        self.input_linear = Linear(hidden_size, 2 * intermediate_size)
        self.output_linear = Linear(intermediate_size, hidden_size)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.output_linear(op, gated(op, self.act, self.input_linear(op, x)))


class GraniteMoeDecoderLayer(ScaledResidualDecoderLayer):
    """Granite's layer whose feed-forward is ``block_sparse_moe`` [+ the dense ``shared_mlp``]."""

    mlp_name = "block_sparse_moe"

    def __init__(self, config: GraniteMoeConfig, self_attn) -> None:
        super().__init__(
            self_attn,
            GraniteMoeBlock(config, config.intermediate_size),
            RMSNorm(config.hidden_size, config.rms_norm_eps),
            RMSNorm(config.hidden_size, config.rms_norm_eps),
            residual_multiplier=config.residual_multiplier,
        )
        self.shared_mlp = make_shared_mlp(config)

    def mlp_branch(self, op, x):
        """``moe(norm(x)) + shared_mlp(norm(x))``; a layer may lack either (Granite-MoE-Hybrid)."""
        normed = self.post_attention_layernorm(op, x)
        parts = [m(op, normed) for m in (self.block_sparse_moe, self.shared_mlp) if m is not None]
        return parts[0] if len(parts) == 1 else op.Add(*parts)


def make_shared_mlp(config: GraniteMoeConfig) -> GraniteSharedMLP | None:
    """Granite-MoE-Shared's dense ``shared_mlp`` (None without ``shared_intermediate_size``)."""
    if not config.shared_intermediate_size:
        return None
    return GraniteSharedMLP(config.hidden_size, config.shared_intermediate_size, config.hidden_act)


class GraniteMoeModel(GraniteModel):
    def make_layer(self, config, layer_idx):
        return GraniteMoeDecoderLayer(config, self.make_attention(config, layer_idx))


class GraniteMoeForCausalLM(GraniteForCausalLM):
    """Logits divided by ``logits_scaling``."""

    config_class = GraniteMoeConfig
    model_class = GraniteMoeModel


MODEL_TYPES = {"granitemoe": GraniteMoeForCausalLM, "granitemoeshared": GraniteMoeForCausalLM}
