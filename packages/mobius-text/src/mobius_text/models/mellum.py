"""Mellum (JetBrains): Qwen3-MoE attention and experts with one RoPE table per layer type.

``rope_parameters`` holds a schedule for ``full_attention`` and one for
``sliding_attention`` layers (different thetas); ``layer_types`` picks each layer's
mask and table, and ``mlp_layer_types`` makes a layer ``"dense"`` (gated MLP of
``intermediate_size``) or ``"sparse"`` (routed experts, softmax top-k). The
multi-token-prediction head (``mtp.*``) is not part of the causal LM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from mobius.components import GatedMLP, make_rotary_embedding
from mobius.config import RopeConfig
from mobius_text.models.mixtral import SparseMoeBlock
from mobius_text.models.qwen import QwenConfig
from mobius_text.models.qwen2_moe import make_experts
from mobius_text.models.qwen3_moe import Qwen3MoeForCausalLM, Qwen3MoeModel


@dataclass
class MellumConfig(QwenConfig):
    num_experts: int = 64
    num_experts_per_tok: int = 8
    moe_intermediate_size: int = 896
    norm_topk_prob: bool = True
    mlp_layer_types: list[str] = field(default_factory=list)
    # ``rope`` (inherited) is the full-attention schedule; sliding layers use this one.
    sliding_rope: RopeConfig = field(default_factory=RopeConfig)

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        params = hf_config.rope_parameters
        fields.update(
            attention_bias=bool(getattr(hf_config, "attention_bias", False)),
            rope=RopeConfig.from_hf(SimpleNamespace(rope_parameters=params["full_attention"])),
            sliding_rope=RopeConfig.from_hf(
                SimpleNamespace(rope_parameters=params["sliding_attention"])
            ),
            layer_types=list(hf_config.layer_types),
            num_experts=hf_config.num_experts,
            num_experts_per_tok=hf_config.num_experts_per_tok,
            moe_intermediate_size=hf_config.moe_intermediate_size,
            norm_topk_prob=bool(hf_config.norm_topk_prob),
            mlp_layer_types=list(hf_config.mlp_layer_types),
        )
        return fields

    def is_moe_layer(self, layer_idx: int) -> bool:
        return self.mlp_layer_types[layer_idx] == "sparse"


class MellumModel(Qwen3MoeModel):
    def __init__(self, config: MellumConfig) -> None:
        super().__init__(config)
        # No parameters: held outside the module tree, like ``rotary_emb``.
        self.sliding_rotary_emb = make_rotary_embedding(
            config.sliding_rope, config.head_dim, config.max_position_embeddings
        )

    def make_mlp(self, config, layer_idx):
        if not config.is_moe_layer(layer_idx):
            return GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
        return SparseMoeBlock(*make_experts(config), config.hidden_size)

    def position_embeddings(self, op, position_ids):
        tables = {"full_attention": self.rotary_emb, "sliding_attention": self.sliding_rotary_emb}
        return {
            kind: tables[kind](op, position_ids) for kind in dict.fromkeys(self.config.layer_types)
        }


class MellumForCausalLM(Qwen3MoeForCausalLM):
    config_class = MellumConfig
    model_class = MellumModel
    ignored = ("mtp.*",)  # the multi-token-prediction head, unused by the causal LM


MODEL_TYPES = {"mellum": MellumForCausalLM}
