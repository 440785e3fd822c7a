"""Qwen2-MoE: Qwen2 whose MLPs are routed experts plus one sigmoid-gated shared expert.

Layers listed in ``mlp_only_layers``, or off the ``decoder_sparse_step`` grid, keep a
dense MLP. The router keeps the raw top-k softmax probabilities unless
``norm_topk_prob``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mobius.components import Attention, DecoderLayer, GatedMLP, Linear, RMSNorm, rotary_dim
from mobius.components.moe import ExpertList, TopKRouter, flatten_tokens, unflatten_tokens
from mobius_text.models.llama import LlamaForCausalLM, LlamaModel
from mobius_text.models.mixtral import SparseMoeBlock
from mobius_text.models.qwen import QwenConfig


@dataclass
class Qwen2MoeConfig(QwenConfig):
    num_experts: int = 60
    num_experts_per_tok: int = 4
    moe_intermediate_size: int = 1408
    shared_expert_intermediate_size: int = 0
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: list[int] = field(default_factory=list)

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "attention_bias": bool(getattr(hf_config, "qkv_bias", True)),
            "num_experts": hf_config.num_experts,
            "num_experts_per_tok": hf_config.num_experts_per_tok,
            "moe_intermediate_size": hf_config.moe_intermediate_size,
            "shared_expert_intermediate_size": getattr(
                hf_config, "shared_expert_intermediate_size", 0
            ),
            "norm_topk_prob": bool(hf_config.norm_topk_prob),
            "decoder_sparse_step": hf_config.decoder_sparse_step,
            "mlp_only_layers": list(hf_config.mlp_only_layers or []),
        }

    def is_moe_layer(self, layer_idx: int) -> bool:
        return (
            layer_idx not in self.mlp_only_layers
            and self.num_experts > 0
            and (layer_idx + 1) % self.decoder_sparse_step == 0
        )


class SharedExpertMoeBlock(SparseMoeBlock):
    """Routed experts plus ``shared_expert``, scaled per token by ``sigmoid(shared_expert_gate(x))``."""

    def __init__(self, router, experts, hidden_size, shared_expert_size, act) -> None:
        super().__init__(router, experts, hidden_size)
        self.shared_expert = GatedMLP(hidden_size, shared_expert_size, act)
        self.shared_expert_gate = Linear(hidden_size, 1)

    def forward(self, op, x):
        tokens = flatten_tokens(op, x, self.hidden_size)  # [batch*seq, hidden]
        routed = self.experts.dispatch(op, tokens, self.gate(op, tokens))
        shared_gate = op.Sigmoid(self.shared_expert_gate(op, tokens))  # [batch*seq, 1]
        shared = op.Mul(shared_gate, self.shared_expert(op, tokens))
        return unflatten_tokens(op, op.Add(routed, shared), x)


def make_experts(config: Qwen2MoeConfig) -> tuple[TopKRouter, ExpertList]:
    """``gate`` and ``experts.{e}.{gate,up,down}_proj`` of a Qwen-MoE layer."""
    router = TopKRouter(
        config.hidden_size,
        config.num_experts,
        config.num_experts_per_tok,
        normalize=config.norm_topk_prob,
    )
    experts = ExpertList(
        [
            GatedMLP(config.hidden_size, config.moe_intermediate_size, config.hidden_act)
            for _ in range(config.num_experts)
        ]
    )
    return router, experts


class Qwen2MoeModel(LlamaModel):
    def make_attention(self, config, layer_idx):
        return Attention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,  # qkv_bias; o_proj never has one
            out_bias=False,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
        )

    def make_mlp(self, config: Qwen2MoeConfig, layer_idx: int):
        if not config.is_moe_layer(layer_idx):
            return GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
        router, experts = make_experts(config)
        return SharedExpertMoeBlock(
            router,
            experts,
            config.hidden_size,
            config.shared_expert_intermediate_size,
            config.hidden_act,
        )

    def make_layer(self, config, layer_idx):
        return DecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=self.make_mlp(config, layer_idx),
            input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class Qwen2MoeForCausalLM(LlamaForCausalLM):
    config_class = Qwen2MoeConfig
    model_class = Qwen2MoeModel


MODEL_TYPES = {"qwen2_moe": Qwen2MoeForCausalLM}
