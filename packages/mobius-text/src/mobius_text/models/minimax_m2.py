"""MiniMax-M2: OLMo-2-style attention (q/k RMS norms across all heads, partial RoPE) and a
sigmoid-routed MoE whose expert *choice* is shifted by ``e_score_correction_bias``.

The router scores are ``sigmoid(logits)``; the top-k experts are chosen on
``scores + e_score_correction_bias`` and weighted by their unbiased scores, renormalised
to sum to one. Experts use Mixtral's ``block_sparse_moe.experts.{e}.w1/w2/w3`` names.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import RMSNorm, TransposedParameter, rotary_dim
from mobius.components.moe import (
    ExpertList,
    ExpertW123,
    flatten_tokens,
    top_k_routing,
    unflatten_tokens,
)
from mobius_text.models.llama import LlamaForCausalLM, LlamaModel
from mobius_text.models.mixtral import BlockSparseDecoderLayer, MixtralConfig
from mobius_text.models.olmoe import FullWidthQKNormAttention


@dataclass
class MiniMaxM2Config(MixtralConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(sliding_window=None, layer_types=[])  # always a full causal mask
        return fields


class SigmoidRouter(nn.Module):
    """``weight [experts, hidden]``: sigmoid scores, biased choice, renormalised weights."""

    def __init__(self, hidden_size: int, num_experts: int, top_k: int) -> None:
        super().__init__()
        self.weight = TransposedParameter(num_experts, hidden_size)
        self.top_k = top_k

    def forward(self, op, x, choice_bias):
        return top_k_routing(
            op,
            op.MatMul(x, self.weight),
            self.top_k,
            scoring="sigmoid",
            choice_bias=choice_bias,
            normalize=True,
        )


class MiniMaxM2SparseMoeBlock(nn.Module):
    def __init__(self, config: MiniMaxM2Config) -> None:
        super().__init__()
        e, h = config.num_local_experts, config.hidden_size
        self.gate = SigmoidRouter(h, e, config.num_experts_per_tok)
        self.experts = ExpertList(
            [ExpertW123(h, config.intermediate_size, config.hidden_act) for _ in range(e)]
        )
        self.e_score_correction_bias = nn.Parameter([e])
        self.hidden_size = h

    def forward(self, op, x):
        tokens = flatten_tokens(op, x, self.hidden_size)
        routing = self.gate(op, tokens, self.e_score_correction_bias)
        return unflatten_tokens(op, self.experts.dispatch(op, tokens, routing), x)


class MiniMaxM2Model(LlamaModel):
    def make_layer(self, config, layer_idx):
        attention = FullWidthQKNormAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            eps=config.rms_norm_eps,
        )
        return BlockSparseDecoderLayer(
            self_attn=attention,
            mlp=MiniMaxM2SparseMoeBlock(config),
            input_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=RMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class MiniMaxM2ForCausalLM(LlamaForCausalLM):
    config_class = MiniMaxM2Config
    model_class = MiniMaxM2Model


MODEL_TYPES = {"minimax_m2": MiniMaxM2ForCausalLM}
