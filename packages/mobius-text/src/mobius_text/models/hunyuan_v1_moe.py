"""Hunyuan V1 MoE: Hunyuan V1 Dense attention (q/k norms after RoPE) with a MoE block in every layer.

The block adds a shared gated MLP (``shared_mlp``, ``intermediate_size``) to the
routed experts; the router (``gate.wg``) takes the top ``moe_topk`` softmax
probabilities and renormalises them. ``num_experts`` / ``moe_topk`` may be per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir
from onnxscript import nn

from mobius.components import DecoderLayer, GatedMLP, Linear, RMSNorm
from mobius.components.moe import ExpertList, flatten_tokens, top_k_routing, unflatten_tokens
from mobius_text.models.hunyuan_v1_dense import (
    HunYuanDenseV1Config,
    HunYuanDenseV1ForCausalLM,
    HunYuanDenseV1Model,
)


@dataclass
class HunYuanMoEV1Config(HunYuanDenseV1Config):
    num_experts: int | list[int] = 1
    moe_topk: int | list[int] = 1

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "num_experts": hf_config.num_experts,
            "moe_topk": hf_config.moe_topk,
        }


def per_layer(value: int | list[int], layer_idx: int) -> int:
    return value if isinstance(value, int) else value[layer_idx]


class HunYuanMoEV1Gate(nn.Module):
    """``wg`` logits → top-k softmax probabilities, renormalised, as a dense matrix."""

    def __init__(self, hidden_size: int, num_experts: int, top_k: int) -> None:
        super().__init__()
        self.wg = Linear(hidden_size, num_experts)
        self.top_k = top_k

    def forward(self, op, x: ir.Value) -> ir.Value:
        return top_k_routing(op, self.wg(op, x), self.top_k, normalize=True)  # float32 routing


class HunYuanMoEV1Moe(nn.Module):
    def __init__(self, config: HunYuanMoEV1Config, layer_idx: int) -> None:
        super().__init__()
        c = config
        num_experts = per_layer(c.num_experts, layer_idx)
        self.gate = HunYuanMoEV1Gate(c.hidden_size, num_experts, per_layer(c.moe_topk, layer_idx))
        self.experts = ExpertList(
            [GatedMLP(c.hidden_size, c.intermediate_size, c.hidden_act) for _ in range(num_experts)]
        )
        self.shared_mlp = GatedMLP(c.hidden_size, c.intermediate_size, c.hidden_act)
        self.hidden_size = c.hidden_size

    def forward(self, op, x: ir.Value) -> ir.Value:
        flat = flatten_tokens(op, x, self.hidden_size)  # [N, hidden]
        routed = unflatten_tokens(op, self.experts.dispatch(op, flat, self.gate(op, flat)), x)
        return op.Add(routed, self.shared_mlp(op, x))


class HunYuanMoEV1Model(HunYuanDenseV1Model):
    def make_layer(self, config, layer_idx):
        return DecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=HunYuanMoEV1Moe(config, layer_idx),
            input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class HunYuanMoEV1ForCausalLM(HunYuanDenseV1ForCausalLM):
    config_class = HunYuanMoEV1Config
    model_class = HunYuanMoEV1Model


MODEL_TYPES = {"hunyuan_v1_moe": HunYuanMoEV1ForCausalLM}
