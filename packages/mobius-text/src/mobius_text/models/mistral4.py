"""Mistral 4 (Mistral Small 4's decoder): DeepSeek-V3's MLA and experts, with Llama 4's query
scale and softmax group routing.

What differs from DeepSeek-V3:

- after RoPE the queries are multiplied by Ministral 3's (Llama 4's) position-dependent
  ``1 + llama_4_scaling_beta * log(1 + floor(position / original_max_position_embeddings))``;
- the router ranks experts by their softmax scores (no sigmoid, no correction bias): groups
  by the sum of their two best scores, experts by score within the ``topk_group`` best
  groups, weighted by those scores (renormalised when ``norm_topk_prob``), times
  ``routed_scaling_factor``;
- the routed experts are stored fused (``experts.gate_up_proj`` ``[E, 2 * inter, hidden]``,
  ``experts.down_proj``): transformers keeps no per-expert layout for Mistral 4;
- the rope spans ``qk_rope_head_dim`` (transformers says so with a ``partial_rotary_factor``
  of the whole query head; here the rotary's head is the rope part itself).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import onnx_ir as ir

from mobius.errors import ConfigError
from mobius_text.models.deepseek_v2 import (
    FLOAT,
    DeepseekV2Attention,
    DeepseekV2ForCausalLM,
    DeepseekV2Model,
    DeepseekV2MoE,
    DeepseekV2Router,
)
from mobius_text.models.deepseek_v3 import DeepseekV3Config
from mobius_text.models.ministral3 import QueryScaledRotaryEmbedding
from mobius_text.models.qwen3_vl_text import StackedExperts


@dataclass
class Mistral4Config(DeepseekV3Config):
    llama_4_scaling_beta: float = 0.0
    llama_4_scaling_positions: int = 1  # rope's original_max_position_embeddings

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        rope_parameters = hf_config.rope_parameters or {}
        beta = rope_parameters.get("llama_4_scaling_beta")
        positions = rope_parameters.get("original_max_position_embeddings")
        # transformers' attention multiplies by both unconditionally
        if not isinstance(beta, (int, float)) or not isinstance(positions, int) or positions < 1:
            raise ConfigError(
                "mistral4: rope_parameters needs a llama_4_scaling_beta and a positive "
                f"original_max_position_embeddings, got {beta!r} and {positions!r}"
            )
        return dict(
            fields,
            topk_method="softmax_group",
            norm_topk_prob=bool(hf_config.norm_topk_prob),
            rope=dataclasses.replace(fields["rope"], partial_rotary_factor=1.0),
            llama_4_scaling_beta=float(beta),
            llama_4_scaling_positions=positions,
        )


class Mistral4Router(DeepseekV2Router):
    """Softmax scores; groups ranked by their two best; the top k of the best groups."""

    def forward(self, op, x: ir.Value, correction_bias: ir.Value | None = None) -> ir.Value:
        logits = op.MatMul(op.Cast(x, to=FLOAT), op.Cast(self.weight, to=FLOAT))  # [N, E]
        scores = op.Softmax(logits, axis=-1)
        best_two, _ = self.top(op, self.per_group(op, scores), 2)
        mask = self.group_mask(op, op.ReduceSum(best_two, [-1], keepdims=0))
        # transformers zeroes the other groups' scores (softmax scores are all above zero)
        weights, experts = self.top(op, op.Where(mask, scores, 0.0), self.top_k)
        if self.norm_topk_prob:
            weights = op.Div(weights, op.Add(op.ReduceSum(weights, [-1], keepdims=1), 1e-20))
        weights = op.Mul(weights, self.scaling)
        return op.ScatterElements(op.ConstantOfShape(op.Shape(scores)), experts, weights, axis=1)


class Mistral4MoE(DeepseekV2MoE):
    """DeepSeek's routed and shared experts; the routed ones fused, as the checkpoint keeps them."""

    def __init__(self, config: Mistral4Config) -> None:
        super().__init__(config)
        c = config
        self.gate = Mistral4Router(c)
        self.experts = StackedExperts(
            c.n_routed_experts, c.hidden_size, c.moe_intermediate_size, c.hidden_act
        )


class Mistral4Attention(DeepseekV2Attention):
    """MLA whose rotated queries are scaled by position (the rotary module's third output)."""

    def scale_query(self, op, query: ir.Value, *extra: ir.Value) -> ir.Value:
        (query_scale,) = extra  # [batch, 1, seq, 1]
        return op.Mul(query, op.CastLike(query_scale, query))


class Mistral4Model(DeepseekV2Model):
    def __init__(self, config: Mistral4Config) -> None:
        super().__init__(config)
        self.rotary_emb = QueryScaledRotaryEmbedding(
            self.rotary_emb, config.llama_4_scaling_beta, config.llama_4_scaling_positions
        )

    def make_attention(self, config, layer_idx):
        return Mistral4Attention(config)

    def make_mlp(self, config, layer_idx):
        if config.mlp_layer_types[layer_idx] == "sparse":
            return Mistral4MoE(config)
        return super().make_mlp(config, layer_idx)


class Mistral4ForCausalLM(DeepseekV2ForCausalLM):
    """Mistral 4's causal LM (HF ``Mistral4ForCausalLM``)."""

    config_class = Mistral4Config
    model_class = Mistral4Model


MODEL_TYPES = {"mistral4": Mistral4ForCausalLM}
