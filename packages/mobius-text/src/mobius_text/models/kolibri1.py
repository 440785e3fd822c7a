"""Kolibri-1: EXAONE 4 attention, GLM-4 sandwich norms, and a sigmoid-gated MoE in every layer.

Attention normalises queries and keys per head; with a sliding window the
sliding layers use RoPE and the global ones none (NoPE). Each sublayer output is
RMS-normalised again before its residual add (``post_attn_norm`` /
``post_ffn_norm``). The router picks the top k of ``logits + expert_bias`` and
weights them by ``sigmoid(logits)`` (renormalised when ``norm_topk_prob``); a
shared gated MLP always runs. Checkpoints keep the bias at ``moe.router.expert_bias``.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir
from onnxscript import nn

from mobius.components import GatedMLP, RMSNorm, TransposedParameter
from mobius.components.moe import ExpertList, flatten_tokens, scatter_top_k, unflatten_tokens
from mobius_text.models.deepseek_v2 import DeepseekMoEConfig
from mobius_text.models.exaone_moe import ExaoneMoeModel
from mobius_text.models.llama import LlamaForCausalLM

FLOAT = ir.DataType.FLOAT


@dataclass
class Kolibri1Config(DeepseekMoEConfig):
    shared_expert_intermediate_size: int = 0

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        return {
            **fields,
            "mlp_layer_types": ["sparse"] * fields["num_hidden_layers"],
            "shared_expert_intermediate_size": hf_config.shared_expert_intermediate_size,
            "attention_bias": False,
            "mlp_bias": False,
        }


class Kolibri1Router(nn.Module):
    """Top k of ``logits + expert_bias``, weighted by ``sigmoid(logits)``; a dense ``[N, E]`` matrix."""

    def __init__(self, hidden_size: int, num_experts: int, top_k: int, normalize: bool) -> None:
        super().__init__()
        self.weight = TransposedParameter(num_experts, hidden_size)
        self.top_k, self.normalize = top_k, normalize

    def forward(self, op, x: ir.Value, expert_bias: ir.Value) -> ir.Value:
        logits = op.MatMul(op.Cast(x, to=FLOAT), op.Cast(self.weight, to=FLOAT))  # [N, E]
        k = op.Constant(value_ints=[self.top_k])
        _, experts = op.TopK(op.Add(logits, expert_bias), k, axis=-1, _outputs=2)
        weights = op.Sigmoid(op.GatherElements(logits, experts, axis=1))
        if self.normalize:
            weights = op.Div(weights, op.ReduceSum(weights, [-1], keepdims=1))
        return scatter_top_k(op, weights, experts, logits)


class Kolibri1SparseMoeBlock(nn.Module):
    def __init__(self, config: Kolibri1Config) -> None:
        super().__init__()
        c = config
        self.gate = Kolibri1Router(
            c.hidden_size, c.n_routed_experts, c.num_experts_per_tok, c.norm_topk_prob
        )
        self.experts = ExpertList(
            [
                GatedMLP(c.hidden_size, c.moe_intermediate_size, c.hidden_act)
                for _ in range(c.n_routed_experts)
            ]
        )
        self.shared_experts = GatedMLP(
            c.hidden_size, c.shared_expert_intermediate_size, c.hidden_act
        )
        self.hidden_size = c.hidden_size

    def forward(self, op, x: ir.Value, expert_bias: ir.Value) -> ir.Value:
        flat = flatten_tokens(op, x, self.hidden_size)  # [N, hidden]
        routing = self.gate(op, flat, expert_bias)
        routed = unflatten_tokens(op, self.experts.dispatch(op, flat, routing), x)
        return op.Add(routed, self.shared_experts(op, x))


class ExpertBias(nn.Module):
    """Holds ``expert_bias [num_experts]`` where the checkpoint puts it (``moe.router``)."""

    def __init__(self, num_experts: int) -> None:
        super().__init__()
        self.expert_bias = nn.Parameter([num_experts])

    def forward(self, op) -> ir.Value:
        return op.Cast(self.expert_bias, to=FLOAT)


class RouterBias(nn.Module):
    def __init__(self, num_experts: int) -> None:
        super().__init__()
        self.router = ExpertBias(num_experts)

    def forward(self, op) -> ir.Value:
        return self.router(op)


class Kolibri1DecoderLayer(nn.Module):
    """``x + post_attn_norm(attn(norm(x)))`` then ``x + post_ffn_norm(moe(norm(x)))``."""

    def __init__(self, self_attn, config: Kolibri1Config) -> None:
        super().__init__()
        dim, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = self_attn
        self.mlp = Kolibri1SparseMoeBlock(config)
        self.moe = RouterBias(config.n_routed_experts)
        self.input_layernorm = RMSNorm(dim, eps)
        self.post_attn_norm = RMSNorm(dim, eps)
        self.post_attention_layernorm = RMSNorm(dim, eps)
        self.post_ffn_norm = RMSNorm(dim, eps)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.self_attn(
            op, self.input_layernorm(op, x), position_embeddings, bias, past_key, past_value
        )
        x = op.Add(x, self.post_attn_norm(op, h))
        h = self.mlp(op, self.post_attention_layernorm(op, x), self.moe(op))
        return op.Add(x, self.post_ffn_norm(op, h)), present


class Kolibri1Model(ExaoneMoeModel):
    """EXAONE-MoE's q/k-normed, NoPE-on-global attention in sandwich-norm MoE layers."""

    def make_layer(self, config, layer_idx):
        return Kolibri1DecoderLayer(self.make_attention(config, layer_idx), config)


class Kolibri1ForCausalLM(LlamaForCausalLM):
    config_class = Kolibri1Config
    model_class = Kolibri1Model


MODEL_TYPES = {"kolibri1": Kolibri1ForCausalLM}
