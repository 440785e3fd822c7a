"""PhiMoE (Phi-3.5-MoE): Mixtral layout with LayerNorms, a sparse-mixer router and LongRoPE mscales.

The sparse mixer (inference form) picks the best expert, then the best of the
others; each one's weight is its softmax probability among the experts whose logit
lies within a relative ``2 * router_jitter_noise`` of the chosen one (others masked
out). The two weights are not renormalised.

RoPE follows transformers' ``PhimoeRotaryEmbedding``: the inverse frequencies always
use ``short_factor`` (it never passes the sequence length to the LongRoPE schedule),
while cos/sin are scaled by ``long_mscale`` once ``max(position_ids) + 1`` exceeds
``original_max_position_embeddings`` and by ``short_mscale`` before.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    LayerNorm,
    Linear,
    RotaryEmbedding,
    TransposedParameter,
    default_inv_freq,
    rotary_dim,
)
from mobius.components.moe import ExpertList, ExpertW123, scatter_top_k
from mobius_text.models.llama import LlamaForCausalLM
from mobius_text.models.mixtral import (
    BlockSparseDecoderLayer,
    MixtralConfig,
    MixtralModel,
    SparseMoeBlock,
)


@dataclass
class PhimoeConfig(MixtralConfig):
    router_jitter_noise: float = 0.01
    lm_head_bias: bool = False
    short_mscale: float | None = None
    long_mscale: float | None = None

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        rope = dict(getattr(hf_config, "rope_parameters", None) or {})
        if fields["rope"].original_max_position_embeddings is None:  # top-level in older configs
            original = getattr(hf_config, "original_max_position_embeddings", None)
            fields["rope"].original_max_position_embeddings = original
        fields.update(
            attention_bias=bool(getattr(hf_config, "attention_bias", False)),
            router_jitter_noise=float(hf_config.router_jitter_noise),
            lm_head_bias=bool(getattr(hf_config, "lm_head_bias", False)),
            short_mscale=rope.get("short_mscale"),
            long_mscale=rope.get("long_mscale"),
        )
        return fields


def _far_below(op, scores, best, jitter_eps: float):
    """True where ``(best - scores) / max(|scores|, best) > 2 * jitter_eps``: masked out."""
    factor = op.Max(op.Abs(scores), best)
    return op.Greater(op.Div(op.Sub(best, scores), factor), 2 * jitter_eps)


def sparsemixer_routing(op, logits, jitter_eps: float):
    """Dense ``[tokens, experts]`` routing weights of the sparse mixer at inference (top-2)."""
    scores = op.Cast(logits, to=ir.DataType.FLOAT)
    neg_inf = op.Constant(value=ir.tensor(np.array(-np.inf, dtype=np.float32)))
    one = op.Constant(value_ints=[1])

    best1, first = op.TopK(scores, one, axis=-1, _outputs=2)  # [tokens, 1]
    gates1 = op.Where(_far_below(op, scores, best1, jitter_eps), neg_inf, scores)
    weight1 = op.GatherElements(op.Softmax(gates1, axis=-1), first, axis=1)

    # The first expert masked out of the running; the threshold still compares raw scores.
    others = op.ScatterElements(scores, first, op.Expand(neg_inf, op.Shape(first)), axis=1)
    best2, second = op.TopK(others, one, axis=-1, _outputs=2)
    gates2 = op.Where(_far_below(op, scores, best2, jitter_eps), neg_inf, others)
    weight2 = op.GatherElements(op.Softmax(gates2, axis=-1), second, axis=1)

    values = op.Concat(weight1, weight2, axis=-1)  # [tokens, 2]
    indices = op.Concat(first, second, axis=-1)
    return scatter_top_k(op, values, indices, scores)


class SparseMixerRouter(nn.Module):
    """``weight [experts, hidden]`` logits, routed by :func:`sparsemixer_routing`."""

    def __init__(self, hidden_size: int, num_experts: int, jitter_eps: float) -> None:
        super().__init__()
        self.weight = TransposedParameter(num_experts, hidden_size)
        self.jitter_eps = jitter_eps

    def forward(self, op, x):
        return sparsemixer_routing(op, op.MatMul(x, self.weight), self.jitter_eps)


class PhimoeRotaryEmbedding(RotaryEmbedding):
    """Short-factor frequencies; cos/sin scaled by the short or long mscale by sequence length."""

    def __init__(self, config: PhimoeConfig) -> None:
        rope = config.rope
        dim = rotary_dim(rope, config.head_dim)
        short = np.asarray(rope.short_factor, np.float32)
        super().__init__((default_inv_freq(rope.theta, dim) / short).astype(np.float32))
        self.original = rope.original_max_position_embeddings
        self.short_mscale, self.long_mscale = config.short_mscale, config.long_mscale

    def forward(self, op, position_ids):
        cos, sin = super().forward(op, position_ids)
        longest = op.Add(op.ReduceMax(position_ids, keepdims=0), 1)
        mscale = op.Where(
            op.Greater(longest, self.original),
            op.Constant(value_float=float(self.long_mscale)),
            op.Constant(value_float=float(self.short_mscale)),
        )
        return op.Mul(cos, mscale), op.Mul(sin, mscale)


class PhimoeModel(MixtralModel):
    def __init__(self, config: PhimoeConfig) -> None:
        super().__init__(config)
        self.norm = LayerNorm(config.hidden_size, config.rms_norm_eps)
        if config.rope.rope_type != "default":
            self.rotary_emb = PhimoeRotaryEmbedding(config)

    def make_moe(self, config):
        router = SparseMixerRouter(
            config.hidden_size, config.num_local_experts, config.router_jitter_noise
        )
        experts = ExpertList(
            [
                ExpertW123(config.hidden_size, config.intermediate_size, config.hidden_act)
                for _ in range(config.num_local_experts)
            ]
        )
        return SparseMoeBlock(router, experts, config.hidden_size)

    def make_layer(self, config, layer_idx):
        return BlockSparseDecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=self.make_moe(config),
            input_layernorm=LayerNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=LayerNorm(config.hidden_size, config.rms_norm_eps),
        )


class PhimoeForCausalLM(LlamaForCausalLM):
    config_class = PhimoeConfig
    model_class = PhimoeModel

    def make_head(self, config: PhimoeConfig):
        if config.tie_word_embeddings:
            return super().make_head(config)
        return Linear(config.hidden_size, config.vocab_size, bias=config.lm_head_bias)


MODEL_TYPES = {"phimoe": PhimoeForCausalLM}
