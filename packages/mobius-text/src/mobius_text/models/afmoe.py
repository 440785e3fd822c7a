"""AFMoE: a sparse-MoE decoder with gated, qk-normed attention and sandwich norms.

What differs from Llama:

- queries and keys are RMS-normalised per head; the attention output is gated by
  ``sigmoid(gate_proj(x))`` before ``o_proj``; only sliding-window layers use RoPE
  (global layers are NoPE);
- each block is wrapped by two norms: ``x + post_norm(block(pre_norm(x)))``;
- the first ``num_dense_layers`` layers keep a dense MLP; the others use shared experts
  plus top-k routed experts: sigmoid router scores, selection on ``score + expert_bias``,
  weights the selected scores normalised to sum 1 and times ``route_scale``;
- with ``mup_enabled``, embeddings are scaled by ``sqrt(hidden_size)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, GatedMLP, Linear, RMSNorm, merge_heads, rotary_dim
from mobius.components.moe import ExpertList, flatten_tokens, top_k_routing, unflatten_tokens
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel
from mobius_text.models.qwen import QKNormAttention


@dataclass
class AfmoeConfig(LlamaConfig):
    """Llama fields plus the dense/MoE layout and routing constants."""

    moe_intermediate_size: int = 0
    num_dense_layers: int = 0
    num_experts: int = 0
    num_experts_per_tok: int = 0
    num_shared_experts: int = 0
    route_scale: float = 1.0
    mup_enabled: bool = False

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "mlp_bias": False,
            "moe_intermediate_size": hf_config.moe_intermediate_size,
            "num_dense_layers": hf_config.num_dense_layers or 0,
            "num_experts": hf_config.num_experts,
            "num_experts_per_tok": hf_config.num_experts_per_tok,
            "num_shared_experts": hf_config.num_shared_experts,
            "route_scale": float(hf_config.route_scale),
            "mup_enabled": bool(hf_config.mup_enabled),
        }


class AfmoeTokenChoiceRouter(nn.Module):
    """Sigmoid scores of a bias-free linear gate: ``[tokens, hidden]`` → ``[tokens, experts]``."""

    def __init__(self, hidden: int, num_experts: int) -> None:
        super().__init__()
        self.gate = Linear(hidden, num_experts)

    def forward(self, op, x: ir.Value) -> ir.Value:
        return self.gate(op, x)


class AfmoeSparseMoeBlock(nn.Module):
    """Shared experts plus sigmoid-routed experts (``expert_bias`` only steers the choice).

    The checkpoint stores one module per expert (``experts.{e}.gate_proj``...), which the
    shared :class:`ExpertList` dispatches sparsely.
    """

    def __init__(self, config: AfmoeConfig) -> None:
        super().__init__()
        hidden, inter = config.hidden_size, config.moe_intermediate_size
        self.router = AfmoeTokenChoiceRouter(hidden, config.num_experts)
        self.shared_experts = GatedMLP(hidden, inter * config.num_shared_experts, config.hidden_act)
        self.experts = ExpertList(
            [GatedMLP(hidden, inter, config.hidden_act) for _ in range(config.num_experts)]
        )
        self.expert_bias = nn.Parameter([config.num_experts])
        self.top_k, self.route_scale, self.hidden = (
            config.num_experts_per_tok,
            config.route_scale,
            hidden,
        )

    def forward(self, op, x: ir.Value) -> ir.Value:
        flat = flatten_tokens(op, x, self.hidden)  # [tokens, hidden]
        # Weights: the chosen sigmoid scores over their sum (HF adds 1e-20 to it: a no-op
        # next to a sum of sigmoids), times route_scale.
        routing = top_k_routing(
            op,
            self.router(op, flat),
            self.top_k,
            scoring="sigmoid",
            choice_bias=self.expert_bias,
        )
        routing = op.Mul(routing, self.route_scale)  # [tokens, experts], zero off the top-k
        out = op.Add(self.shared_experts(op, flat), self.experts.dispatch(op, flat, routing))
        return unflatten_tokens(op, out, x)


class AfmoeAttention(QKNormAttention):
    """QK-normed attention whose output is gated by ``sigmoid(gate_proj(x))``."""

    def __init__(self, config: AfmoeConfig) -> None:
        super().__init__(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            eps=config.rms_norm_eps,
        )
        width = config.num_attention_heads * config.head_dim
        self.gate_proj = Linear(config.hidden_size, width)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)  # [batch, heads, seq, head_dim]
        if position_embeddings is not None:  # sliding layers only
            cos, sin = position_embeddings
            cos, sin = op.CastLike(cos, q), op.CastLike(sin, q)
            q = op.RotaryEmbedding(q, cos, sin, interleaved=0, rotary_embedding_dim=self.rotary_dim)
            k = op.RotaryEmbedding(k, cos, sin, interleaved=0, rotary_embedding_dim=self.rotary_dim)
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        y = merge_heads(op, y)
        y = op.Mul(y, op.Sigmoid(self.gate_proj(op, x)))
        return self.o_proj(op, y), (present_key, present_value)


class AfmoeDecoderLayer(nn.Module):
    """``x + post_norm(block(pre_norm(x)))`` for attention and for the (dense or MoE) MLP."""

    def __init__(self, config: AfmoeConfig, layer_idx: int) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = AfmoeAttention(config)
        self.input_layernorm = RMSNorm(hidden, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.pre_mlp_layernorm = RMSNorm(hidden, eps)
        self.post_mlp_layernorm = RMSNorm(hidden, eps)
        if layer_idx >= config.num_dense_layers:
            self.mlp = AfmoeSparseMoeBlock(config)
        else:
            self.mlp = GatedMLP(hidden, config.intermediate_size, config.hidden_act)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.self_attn(
            op, self.input_layernorm(op, x), position_embeddings, bias, past_key, past_value
        )
        x = op.Add(x, self.post_attention_layernorm(op, h))
        h = self.mlp(op, self.pre_mlp_layernorm(op, x))
        return op.Add(x, self.post_mlp_layernorm(op, h)), present


class ScaledEmbedding(Embedding):
    """Token lookup times a constant (muP's ``sqrt(hidden_size)``)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, scale: float) -> None:
        super().__init__(num_embeddings, embedding_dim)
        self.scale = scale

    def forward(self, op, ids: ir.Value) -> ir.Value:
        return op.Mul(super().forward(op, ids), self.scale)


class AfmoeModel(LlamaModel):
    def __init__(self, config: AfmoeConfig) -> None:
        super().__init__(config)
        if config.mup_enabled:
            self.embed_tokens = ScaledEmbedding(
                config.vocab_size, config.hidden_size, config.hidden_size**0.5
            )

    def make_layer(self, config, layer_idx):
        return AfmoeDecoderLayer(config, layer_idx)

    def layer_uses_rope(self, layer_idx: int) -> bool:
        return self.config.layer_types[layer_idx] == "sliding_attention"


class AfmoeForCausalLM(LlamaForCausalLM):
    """AFMoE causal LM (HF ``AfmoeForCausalLM``)."""

    config_class = AfmoeConfig
    model_class = AfmoeModel


MODEL_TYPES = {"afmoe": AfmoeForCausalLM}
