"""Mixtral: Mistral whose MLP is a sparse mixture of experts (softmax, top-k, renormalised).

Checkpoints (and transformers 5 ``save_pretrained``) store the block as
``block_sparse_moe.gate`` and one ``w1/w2/w3`` MLP per expert under
``block_sparse_moe.experts.{e}``.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import DecoderLayer, RMSNorm
from mobius.components.moe import (
    ExpertList,
    ExpertW123,
    TopKRouter,
    flatten_tokens,
    unflatten_tokens,
)
from mobius_text.models.llama import LlamaForCausalLM, LlamaModel
from mobius_text.models.mistral import MistralConfig


@dataclass
class MixtralConfig(MistralConfig):
    num_local_experts: int = 8
    num_experts_per_tok: int = 2

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "num_local_experts": hf_config.num_local_experts,
            "num_experts_per_tok": hf_config.num_experts_per_tok,
        }


class SparseMoeBlock(nn.Module):
    """``gate`` routes each token to its top-k ``experts``; their outputs are summed by weight."""

    def __init__(self, router: TopKRouter, experts: ExpertList, hidden_size: int) -> None:
        super().__init__()
        self.gate = router
        self.experts = experts
        self.hidden_size = hidden_size

    def forward(self, op, x):
        tokens = flatten_tokens(op, x, self.hidden_size)  # [batch*seq, hidden]
        y = self.experts.dispatch(op, tokens, self.gate(op, tokens))
        return unflatten_tokens(op, y, x)  # [batch, seq, hidden]


class BlockSparseDecoderLayer(DecoderLayer):
    """The pre-norm decoder layer whose feed-forward is ``block_sparse_moe``."""

    mlp_name = "block_sparse_moe"


class MixtralModel(LlamaModel):
    def make_moe(self, config: MixtralConfig) -> SparseMoeBlock:
        router = TopKRouter(
            config.hidden_size, config.num_local_experts, config.num_experts_per_tok
        )
        experts = ExpertList(
            [
                ExpertW123(config.hidden_size, config.intermediate_size, config.hidden_act)
                for _ in range(config.num_local_experts)
            ]
        )
        return SparseMoeBlock(router, experts, config.hidden_size)

    def make_layer(self, config: MixtralConfig, layer_idx: int) -> BlockSparseDecoderLayer:
        return BlockSparseDecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=self.make_moe(config),
            input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class MixtralForCausalLM(LlamaForCausalLM):
    config_class = MixtralConfig
    model_class = MixtralModel


MODEL_TYPES = {"mixtral": MixtralForCausalLM}
