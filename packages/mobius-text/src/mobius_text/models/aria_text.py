"""Aria's text decoder: Llama whose MLP is routed experts plus always-on shared experts.

The router picks the top-k *logits* and softmaxes over those k only; the routed experts
are SiLU-gated whatever ``hidden_act`` says (that one is the shared experts'), and are
stored fused as ``experts.gate_up_proj [experts, hidden, 2 * inter]`` (gate then up
halves) and ``experts.down_proj [experts, inter, hidden]``: already ``x @ w``, so no
transpose. The shared experts are one gated MLP ``moe_num_shared_experts`` times as
wide. Hub checkpoints name the fused tensors ``experts.fc1.weight`` / ``fc2.weight``.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import DecoderLayer, GatedMLP, RMSNorm, get_activation
from mobius.components.moe import (
    TopKRouter,
    dispatch_experts,
    flatten_tokens,
    gated,
    unflatten_tokens,
)
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class AriaTextConfig(LlamaConfig):
    moe_num_experts: int = 8
    moe_topk: int = 2
    moe_num_shared_experts: int = 2

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "moe_num_experts": int(hf_config.moe_num_experts),
            "moe_topk": int(hf_config.moe_topk),
            "moe_num_shared_experts": int(hf_config.moe_num_shared_experts),
        }


class AriaExperts(nn.Module):
    """All routed experts in two ``[experts, in, out]`` weights, each run on its tokens only."""

    def __init__(self, num_experts: int, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Parameter([num_experts, hidden, 2 * inter])
        self.down_proj = nn.Parameter([num_experts, inter, hidden])
        self.num_experts = num_experts
        self.act = get_activation("silu")

    def expert(self, op, e: int, x):
        index = op.Constant(value_int=e)
        h = gated(op, self.act, op.MatMul(x, op.Gather(self.gate_up_proj, index, axis=0)))
        return op.MatMul(h, op.Gather(self.down_proj, index, axis=0))

    def forward(self, op, x, routing):
        experts = [
            (lambda op, rows, e=e: self.expert(op, e, rows)) for e in range(self.num_experts)
        ]
        return dispatch_experts(op, x, routing, experts)


class AriaTextMoELayer(nn.Module):
    """``experts(x, router(x)) + shared_experts(x)``."""

    def __init__(self, config: AriaTextConfig) -> None:
        super().__init__()
        hidden, inter = config.hidden_size, config.intermediate_size
        self.router = TopKRouter(
            hidden, config.moe_num_experts, config.moe_topk, softmax_first=False
        )
        self.experts = AriaExperts(config.moe_num_experts, hidden, inter)
        self.shared_experts = GatedMLP(
            hidden, inter * config.moe_num_shared_experts, config.hidden_act, config.mlp_bias
        )
        self.hidden_size = hidden

    def forward(self, op, x):
        tokens = flatten_tokens(op, x, self.hidden_size)  # [batch*seq, hidden]
        routed = self.experts(op, tokens, self.router(op, tokens))
        return unflatten_tokens(op, op.Add(routed, self.shared_experts(op, tokens)), x)


class AriaTextModel(LlamaModel):
    def make_layer(self, config: AriaTextConfig, layer_idx: int) -> DecoderLayer:
        return DecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=AriaTextMoELayer(config),
            input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class AriaTextForCausalLM(LlamaForCausalLM):
    config_class = AriaTextConfig
    model_class = AriaTextModel

    def sanitize(self, weights: dict) -> dict:
        """The hub's ``experts.fc1/fc2.weight`` under transformers' fused names."""
        renamed = {}
        for name, value in weights.items():
            name = name.replace(".experts.fc1.weight", ".experts.gate_up_proj")
            renamed[name.replace(".experts.fc2.weight", ".experts.down_proj")] = value
        return super().sanitize(renamed)


MODEL_TYPES = {"aria_text": AriaTextForCausalLM}
