"""A.X-K2: DeepSeek-V3.2 with gated queries, gated norms and zero-masked group routing.

What differs from DeepSeek-V3.2:

- ``q_b_proj`` reads ``[q_resid | q_compressed]`` (the normalised and the raw ``q_a``
  latent) and writes, per head, the query and a gate over that head's value channels;
  the attention output is multiplied by ``sigmoid(gate)`` before ``o_proj``;
- ``input_layernorm`` (every layer) and ``post_attention_layernorm`` (MoE layers) are
  gated: ``y * sigmoid(W_up(silu(W_down(y))))`` with ``y = norm(x)``;
- with ``n_group`` set, experts outside the chosen groups get a choice score of 0
  (not -inf); without it, routing is over all experts.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, RMSNorm, merge_heads
from mobius_text.models.deepseek_v2 import FLOAT, DeepseekV2MoE, DeepseekV2Router
from mobius_text.models.deepseek_v32 import (
    DeepseekV32Attention,
    DeepseekV32Config,
    DeepseekV32ForCausalLM,
    DeepseekV32Model,
    IndexedDecoderLayer,
)


@dataclass
class AXK2Config(DeepseekV32Config):
    """DeepSeek-V3.2's fields plus the gated norms' bottleneck rank."""

    gated_norm_rank: int = 16

    @classmethod
    def hf_fields(cls, hf_config):
        return {**super().hf_fields(hf_config), "gated_norm_rank": hf_config.gated_norm_rank}


class AXK2GatedRMSNorm(nn.Module):
    """``y * sigmoid(W_up(silu(W_down(y))))`` with ``y = norm(x)``."""

    def __init__(self, config: AXK2Config) -> None:
        super().__init__()
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.W_down = Linear(config.hidden_size, config.gated_norm_rank)
        self.W_up = Linear(config.gated_norm_rank, config.hidden_size)

    def forward(self, op, x: ir.Value) -> ir.Value:
        y = self.norm(op, x)
        h = self.W_down(op, y)
        return op.Mul(y, op.Sigmoid(self.W_up(op, op.Mul(h, op.Sigmoid(h)))))


class AXK2Attention(DeepseekV32Attention):
    """DSA-masked MLA whose query projection also makes a sigmoid gate for the output."""

    def __init__(self, config: AXK2Config, has_indexer: bool = True) -> None:
        super().__init__(config, has_indexer)
        width = self.num_heads * (self.nope + self.rope_dim + self.v_dim)
        self.q_b_proj = Linear(2 * config.q_lora_rank, width)  # replaces V3.2's q_b_proj

    def project_query(self, op, x):
        q_compressed = self.q_a_proj(op, x)
        q_resid = self.q_a_layernorm(op, q_compressed)
        qk_dim = self.nope + self.rope_dim
        both = self.heads(
            op, self.q_b_proj(op, op.Concat(q_resid, q_compressed, axis=-1)), qk_dim + self.v_dim
        )  # [b, H, s, qk + v]
        query, gate = op.Split(both, [qk_dim, self.v_dim], axis=-1, _outputs=2)
        gate = merge_heads(op, gate)
        return q_resid, query, gate


class AXK2Router(DeepseekV2Router):
    """Sigmoid + correction-bias routing; experts outside the chosen groups score 0."""

    def forward(self, op, x: ir.Value, correction_bias: ir.Value | None = None) -> ir.Value:
        logits = op.MatMul(op.Cast(x, to=FLOAT), op.Cast(self.weight, to=FLOAT))  # [N, E]
        scores = op.Sigmoid(logits)
        choice = op.Add(scores, op.Cast(self.e_score_correction_bias, to=FLOAT))
        if self.n_group > 1:
            best_two, _ = self.top(op, self.per_group(op, choice), 2)
            mask = self.group_mask(op, op.ReduceSum(best_two, [-1], keepdims=0))
            choice = op.Where(mask, choice, 0.0)
        _, experts = self.top(op, choice, self.top_k)
        weights = op.GatherElements(scores, experts, axis=1)
        if self.norm_topk_prob:
            weights = op.Div(weights, op.Add(op.ReduceSum(weights, [-1], keepdims=1), 1e-20))
        weights = op.Mul(weights, self.scaling)
        return op.ScatterElements(op.ConstantOfShape(op.Shape(scores)), experts, weights, axis=1)


class AXK2MoE(DeepseekV2MoE):
    """DeepSeek's MoE block with A.X-K2's router."""

    def __init__(self, config: AXK2Config) -> None:
        super().__init__(config)
        self.gate = AXK2Router(config)


class AXK2Model(DeepseekV32Model):
    """Gated input norms everywhere; gated post-attention norms on MoE layers."""

    attention_class = AXK2Attention

    def make_mlp(self, config, layer_idx):
        if config.mlp_layer_types[layer_idx] == "sparse":
            return AXK2MoE(config)
        return super().make_mlp(config, layer_idx)

    def make_layer(self, config, layer_idx):
        sparse = config.mlp_layer_types[layer_idx] == "sparse"
        return IndexedDecoderLayer(
            self.make_attention(config, layer_idx),
            self.make_mlp(config, layer_idx),
            AXK2GatedRMSNorm(config),
            AXK2GatedRMSNorm(config)
            if sparse
            else RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class AXK2ForCausalLM(DeepseekV32ForCausalLM):
    """A.X-K2 causal LM (HF ``AXK2ForCausalLM``)."""

    config_class = AXK2Config
    model_class = AXK2Model


MODEL_TYPES = {"axk2": AXK2ForCausalLM}
