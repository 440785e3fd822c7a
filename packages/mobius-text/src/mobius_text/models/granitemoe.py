"""Granite-MoE (and Granite-MoE-Shared): Granite's µP multipliers around a stacked-expert MoE.

Experts are stored stacked, ``block_sparse_moe.input_linear.weight [E, 2*inter, hidden]``
(gate rows first) and ``output_linear.weight [E, hidden, inter]``; the router
``router.layer`` takes the top-k logits and softmaxes over those k. Granite-MoE-Shared
adds a dense gated ``shared_mlp`` (fused ``input_linear``) beside the routed experts.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import Attention, Embedding, Linear, RMSNorm, get_activation, rotary_dim
from mobius.components.moe import (
    StackedLinear,
    dispatch_experts,
    flatten_tokens,
    gated,
    top_k_routing,
    unflatten_tokens,
)
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class GraniteMoeConfig(LlamaConfig):
    embedding_multiplier: float = 1.0
    residual_multiplier: float = 1.0
    attention_multiplier: float = 1.0
    logits_scaling: float = 1.0
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
            embedding_multiplier=float(hf_config.embedding_multiplier),
            residual_multiplier=float(hf_config.residual_multiplier),
            attention_multiplier=float(hf_config.attention_multiplier),
            logits_scaling=float(hf_config.logits_scaling),
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


class GraniteMoeDecoderLayer(nn.Module):
    """Pre-norm layer: ``x + m * attn(norm(x))``, then ``x + m * (moe(norm(x)) [+ shared_mlp])``."""

    def __init__(self, config: GraniteMoeConfig, self_attn) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.block_sparse_moe = GraniteMoeBlock(config, config.intermediate_size)
        if config.shared_intermediate_size:
            self.shared_mlp = GraniteSharedMLP(
                config.hidden_size, config.shared_intermediate_size, config.hidden_act
            )
        else:
            self.shared_mlp = None
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.residual_multiplier = config.residual_multiplier

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.self_attn(
            op, self.input_layernorm(op, x), position_embeddings, bias, past_key, past_value
        )
        x = op.Add(x, op.Mul(h, self.residual_multiplier))
        normed = self.post_attention_layernorm(op, x)
        h = self.block_sparse_moe(op, normed)
        if self.shared_mlp is not None:
            h = op.Add(h, self.shared_mlp(op, normed))
        return op.Add(x, op.Mul(h, self.residual_multiplier)), present


class ScaledEmbedding(Embedding):
    """Token lookup times ``embedding_multiplier`` (the checkpoint stores the unscaled table)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, multiplier: float) -> None:
        super().__init__(num_embeddings, embedding_dim)
        self.multiplier = multiplier

    def forward(self, op, ids):
        return op.Mul(super().forward(op, ids), self.multiplier)


class GraniteMoeModel(LlamaModel):
    def __init__(self, config: GraniteMoeConfig) -> None:
        super().__init__(config)
        self.embed_tokens = ScaledEmbedding(
            config.vocab_size, config.hidden_size, config.embedding_multiplier
        )

    def make_attention(self, config, layer_idx):
        return Attention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            scale=config.attention_multiplier,
        )

    def make_layer(self, config, layer_idx):
        return GraniteMoeDecoderLayer(config, self.make_attention(config, layer_idx))


class GraniteMoeForCausalLM(LlamaForCausalLM):
    """Logits divided by ``logits_scaling``."""

    config_class = GraniteMoeConfig
    model_class = GraniteMoeModel

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        logits, presents = super().forward(
            op, input_ids, attention_mask, position_ids, past_key_values
        )
        return op.Div(logits, self.config.logits_scaling), presents


MODEL_TYPES = {"granitemoe": GraniteMoeForCausalLM, "granitemoeshared": GraniteMoeForCausalLM}
