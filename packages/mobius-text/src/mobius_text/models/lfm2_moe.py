"""LFM2-MoE: LFM2 whose MLPs after the first ``num_dense_layers`` are sigmoid-routed experts.

The router scores experts with ``sigmoid(gate(x))``; with ``use_expert_bias`` the
checkpoint's ``expert_bias`` is added to the scores only to choose the top k. The
kept scores are renormalised (``/ (sum + 1e-6)`` when ``norm_topk_prob``) and scaled
by ``routed_scaling_factor``. Experts are ``w1/w2/w3`` SwiGLU MLPs, one per expert.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir
from onnxscript import nn

from mobius.components.moe import (
    ExpertList,
    ExpertW123,
    TopKRouter,
    flatten_tokens,
    scatter_top_k,
    unflatten_tokens,
)
from mobius.errors import ConfigError
from mobius_text.models.lfm2 import (
    Lfm2Config,
    Lfm2DecoderLayer,
    Lfm2ForCausalLM,
    Lfm2MLP,
    Lfm2Model,
)

FLOAT = ir.DataType.FLOAT
NORM_EPS = 1e-6  # transformers adds it to the sum of the kept scores


@dataclass
class Lfm2MoeConfig(Lfm2Config):
    moe_intermediate_size: int = 1792
    num_dense_layers: int = 2
    num_experts: int = 32
    num_experts_per_tok: int = 4
    use_expert_bias: bool = True
    norm_topk_prob: bool = True
    routed_scaling_factor: float = 1.0

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        experts, top_k = hf_config.num_experts, hf_config.num_experts_per_tok
        dense = hf_config.num_dense_layers
        for name, value in (("num_experts", experts), ("num_experts_per_tok", top_k)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"lfm2_moe: {name} must be a positive int, not {value!r}")
        if top_k > experts:
            raise ConfigError(f"lfm2_moe: num_experts_per_tok {top_k} > num_experts {experts}")
        if not isinstance(dense, int) or isinstance(dense, bool) or dense < 0:
            raise ConfigError(f"lfm2_moe: num_dense_layers must be an int >= 0, not {dense!r}")
        fields.update(
            moe_intermediate_size=hf_config.moe_intermediate_size,
            num_dense_layers=dense,
            num_experts=experts,
            num_experts_per_tok=top_k,
            use_expert_bias=bool(hf_config.use_expert_bias),
            norm_topk_prob=bool(hf_config.norm_topk_prob),
            routed_scaling_factor=float(hf_config.routed_scaling_factor),
        )
        return fields


class Lfm2MoeRouter(TopKRouter):
    """Sigmoid scores; ``expert_bias`` (the block's) only moves the choice of the top k."""

    def __init__(self, config: Lfm2MoeConfig) -> None:
        super().__init__(config.hidden_size, config.num_experts, config.num_experts_per_tok)
        self.normalize, self.scale = config.norm_topk_prob, config.routed_scaling_factor

    def forward(self, op, x, expert_bias=None):
        logits = op.Cast(self.logits(op, x), to=FLOAT)
        scores = op.Sigmoid(logits)
        choice = scores if expert_bias is None else op.Add(scores, op.Cast(expert_bias, to=FLOAT))
        _, indices = op.TopK(choice, op.Constant(value_ints=[self.top_k]), axis=-1, _outputs=2)
        values = op.GatherElements(scores, indices, axis=1)
        if self.normalize:
            total = op.ReduceSum(values, op.Constant(value_ints=[-1]), keepdims=1)
            values = op.Div(values, op.Add(total, op.Constant(value_float=NORM_EPS)))
        values = op.Mul(values, op.Constant(value_float=self.scale))
        return scatter_top_k(op, values, indices, logits)


class Lfm2MoeSparseMoeBlock(nn.Module):
    """``gate`` routes each token to its top k of ``experts.{e}.w1/w2/w3``."""

    def __init__(self, config: Lfm2MoeConfig) -> None:
        super().__init__()
        c = config
        self.gate = Lfm2MoeRouter(c)
        self.experts = ExpertList(
            [ExpertW123(c.hidden_size, c.moe_intermediate_size) for _ in range(c.num_experts)]
        )
        self.expert_bias = nn.Parameter([c.num_experts]) if c.use_expert_bias else None
        self.hidden_size = c.hidden_size

    def forward(self, op, x):
        tokens = flatten_tokens(op, x, self.hidden_size)  # [batch*seq, hidden]
        routing = self.gate(op, tokens, self.expert_bias)
        return unflatten_tokens(op, self.experts.dispatch(op, tokens, routing), x)


class Lfm2MoeDecoderLayer(Lfm2DecoderLayer):
    def __init__(self, config: Lfm2MoeConfig, attends: bool, layer_idx: int) -> None:
        super().__init__(config, attends)
        if layer_idx < config.num_dense_layers:  # a dense SwiGLU of intermediate_size
            self.feed_forward = Lfm2MLP(config.hidden_size, config.intermediate_size)
        else:
            self.feed_forward = Lfm2MoeSparseMoeBlock(config)


class Lfm2MoeModel(Lfm2Model):
    def __init__(self, config: Lfm2MoeConfig) -> None:
        super().__init__(config)
        self.layers = nn.ModuleList(
            [
                Lfm2MoeDecoderLayer(config, kind != "conv", i)
                for i, kind in enumerate(config.layer_types)
            ]
        )


class Lfm2MoeForCausalLM(Lfm2ForCausalLM):
    config_class = Lfm2MoeConfig
    model_class = Lfm2MoeModel


MODEL_TYPES = {"lfm2_moe": Lfm2MoeForCausalLM}
