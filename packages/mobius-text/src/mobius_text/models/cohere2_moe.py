"""Cohere2-MoE: Cohere2's parallel block with routed experts, optional shared experts and RMSNorm.

* ``mlp_layer_types``: ``"dense"`` layers (the first ``first_k_dense_replace``) use a gated
  MLP of ``prefix_dense_intermediate_size``; ``"sparse"`` layers route to experts.
* Router: top-k of the logits, then softmax over those k (``expert_selection_fn="softmax"``)
  or their sigmoids, renormalised when ``norm_topk_prob``.
* ``num_shared_experts`` > 0 adds one gated MLP of ``intermediate_size * num_shared_experts``,
  summed with or averaged against the routed output (``shared_expert_combination_strategy``).
* Sliding layers use RoPE; full layers do not, except dense prefix layers when
  ``prefix_dense_sliding_window_pattern == 1`` (they are all full and keep RoPE).
* Norms are RMSNorm when ``rms_norm_eps`` is set, Cohere's bias-free LayerNorm otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxscript import nn

from mobius.components import GatedMLP, LayerNorm, RMSNorm, TransposedParameter
from mobius.components.moe import ExpertList, flatten_tokens, top_k_routing, unflatten_tokens
from mobius_text.models.cohere import ParallelDecoderLayer
from mobius_text.models.cohere2 import Cohere2Config, Cohere2ForCausalLM, Cohere2Model


@dataclass
class Cohere2MoeConfig(Cohere2Config):
    use_rms_norm: bool = False
    num_experts: int = 8
    num_experts_per_tok: int = 2
    num_shared_experts: int = 0
    shared_expert_combination_strategy: str = "average"
    expert_selection_fn: str = "softmax"
    norm_topk_prob: bool = True
    mlp_layer_types: list[str] = field(default_factory=list)
    prefix_dense_intermediate_size: int | None = None
    prefix_dense_sliding_window_pattern: int = 1

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "use_rms_norm": getattr(hf_config, "rms_norm_eps", None) is not None,
            "num_experts": hf_config.num_experts,
            "num_experts_per_tok": hf_config.num_experts_per_tok,
            "num_shared_experts": hf_config.num_shared_experts,
            "shared_expert_combination_strategy": hf_config.shared_expert_combination_strategy,
            "expert_selection_fn": hf_config.expert_selection_fn,
            "norm_topk_prob": bool(hf_config.norm_topk_prob),
            "mlp_layer_types": list(hf_config.mlp_layer_types),
            "prefix_dense_intermediate_size": hf_config.prefix_dense_intermediate_size,
            "prefix_dense_sliding_window_pattern": hf_config.prefix_dense_sliding_window_pattern,
        }


class Cohere2MoeRouter(nn.Module):
    """``weight [experts, hidden]``; top-k logits, then softmax or (renormalised) sigmoid."""

    def __init__(self, config: Cohere2MoeConfig) -> None:
        super().__init__()
        self.weight = TransposedParameter(config.num_experts, config.hidden_size)
        self.top_k, self.fn = config.num_experts_per_tok, config.expert_selection_fn
        self.normalize = config.norm_topk_prob
        if self.fn not in ("softmax", "sigmoid"):
            raise ValueError(f"unsupported expert_selection_fn {self.fn!r}")

    def forward(self, op, x):
        logits = op.MatMul(x, self.weight)
        if self.fn == "softmax":
            return top_k_routing(op, logits, self.top_k, softmax_first=False)
        # The k largest logits are the k largest sigmoids: choose on sigmoid scores.
        return top_k_routing(op, logits, self.top_k, scoring="sigmoid", normalize=self.normalize)


class Cohere2MoeBlock(nn.Module):
    def __init__(self, config: Cohere2MoeConfig) -> None:
        super().__init__()
        h, inter = config.hidden_size, config.intermediate_size
        self.gate = Cohere2MoeRouter(config)
        self.experts = ExpertList(
            [GatedMLP(h, inter, config.hidden_act) for _ in range(config.num_experts)]
        )
        shared = config.num_shared_experts
        self.shared_experts = GatedMLP(h, inter * shared, config.hidden_act) if shared else None
        self.average = config.shared_expert_combination_strategy == "average"
        if config.shared_expert_combination_strategy not in ("sum", "average"):
            raise ValueError("shared_expert_combination_strategy must be 'sum' or 'average'")
        self.hidden_size = h

    def forward(self, op, x):
        tokens = flatten_tokens(op, x, self.hidden_size)
        y = self.experts.dispatch(op, tokens, self.gate(op, tokens))
        if self.shared_experts is not None:
            y = op.Add(y, self.shared_experts(op, tokens))
            if self.average:
                y = op.Div(y, op.CastLike(2.0, y))
        return unflatten_tokens(op, y, x)


class Cohere2MoeModel(Cohere2Model):
    def __init__(self, config: Cohere2MoeConfig) -> None:
        super().__init__(config)
        self.norm = self.make_norm(config)

    def make_norm(self, config):
        if config.use_rms_norm:
            return RMSNorm(config.hidden_size, config.rms_norm_eps)
        return LayerNorm(config.hidden_size, config.rms_norm_eps, bias=False)

    def is_dense(self, layer_idx: int) -> bool:
        return self.config.mlp_layer_types[layer_idx] == "dense"

    def layer_uses_rope(self, layer_idx: int) -> bool:
        forced = self.is_dense(layer_idx) and self.config.prefix_dense_sliding_window_pattern == 1
        return forced or super().layer_uses_rope(layer_idx)

    def make_layer(self, config, layer_idx):
        if self.is_dense(layer_idx):
            size = config.prefix_dense_intermediate_size or config.intermediate_size
            mlp = GatedMLP(config.hidden_size, size, config.hidden_act)
        else:
            mlp = Cohere2MoeBlock(config)
        return ParallelDecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=mlp,
            input_layernorm=self.make_norm(config),
        )


class Cohere2MoeForCausalLM(Cohere2ForCausalLM):
    config_class = Cohere2MoeConfig
    model_class = Cohere2MoeModel


MODEL_TYPES = {"cohere2_moe": Cohere2MoeForCausalLM}
