"""Beam: Qwen3-MoE attention with output gates, NoPE global layers and DeepSeek-V3 routing.

What differs from Qwen3-MoE:

- the attention output is gated per channel by ``sigmoid(gate_proj(x) + gate_bias[head])``;
- sliding-window layers use RoPE; layers whose ``rope_parameters`` entry is ``None``
  (the full-attention ones) use none and instead scale their queries by
  ``(1 + (position + 1) / 2048) ** 0.1`` ("scalable softmax");
- norms wrap each block (``input``/``post_attention``, ``pre``/``post_feedforward``)
  and the residual adds are depth-scaled: the ``n``-th add (``n = 2 * (layer + 1)``
  for attention, one more for the MLP) is ``h / sqrt(n) + x * sqrt((n - 1) / n)``;
- dense or MoE MLP per ``mlp_layer_types``; the MoE routes as DeepSeek-V3 does
  (sigmoid, ``e_score_correction_bias``, group-limited), with no shared expert;
- the logits are soft-capped by ``final_logit_softcapping``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace

import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    GatedMLP,
    Linear,
    RMSNorm,
    make_rotary_embedding,
)
from mobius.config import RopeConfig
from mobius_text.models.deepseek_v2 import DeepseekMoEConfig, DeepseekV2MoE
from mobius_text.models.gemma2 import SoftcappedLogits
from mobius_text.models.llama import LlamaForCausalLM, LlamaModel
from mobius_text.models.qwen import QKNormAttention

# Scalable-softmax constants of the NoPE layers (fixed in the reference implementation).
SSMAX_LENGTH, SSMAX_POWER = 2048.0, 0.1


@dataclass
class BeamConfig(DeepseekMoEConfig):
    """DeepSeek's MoE layout plus RoPE per layer type (None: NoPE) and the logit cap."""

    # RoPE settings of each layer type; None for a NoPE layer type.
    rope_by_layer_type: dict[str, RopeConfig | None] = field(default_factory=dict)
    final_logit_softcapping: float | None = None

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        params = hf_config.rope_parameters
        by_kind = {
            kind: None
            if params.get(kind) is None
            else RopeConfig.from_hf(SimpleNamespace(rope_parameters=params[kind]))
            for kind in dict.fromkeys(fields["layer_types"])
        }
        fields.update(
            topk_method="noaux_tc",
            n_shared_experts=0,
            rope_by_layer_type=by_kind,
            rope=next((r for r in by_kind.values() if r is not None), None),
            final_logit_softcapping=hf_config.final_logit_softcapping,
        )
        return fields


class BeamAttention(QKNormAttention):
    """QK-normed attention, RoPE or query scaling, output gated by ``sigmoid(gate_proj(x) + gate_bias)``."""

    def __init__(self, config: BeamConfig) -> None:
        super().__init__(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            eps=config.rms_norm_eps,
        )
        self.gate_proj = Linear(config.hidden_size, config.num_attention_heads * config.head_dim)
        self.gate_bias = nn.Parameter([config.num_attention_heads])

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        """``position_embeddings``: ``(cos, sin)`` on RoPE layers, else the query scales ``[b, 1, s, 1]``."""
        q, k, v = self.project_qkv(op, x)  # [batch, heads, seq, head_dim]
        if isinstance(position_embeddings, tuple):
            cos, sin = (op.CastLike(t, q) for t in position_embeddings)
            q = op.RotaryEmbedding(q, cos, sin, interleaved=0)
            k = op.RotaryEmbedding(k, cos, sin, interleaved=0)
        else:
            q = op.Mul(q, op.CastLike(position_embeddings, q))
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        y = op.Transpose(y, perm=[0, 2, 1, 3])  # [batch, seq, heads, head_dim]
        gate = op.Reshape(self.gate_proj(op, x), op.Constant(value_ints=[0, 0, -1, self.head_dim]))
        gate = op.Add(gate, op.Unsqueeze(self.gate_bias, [-1]))  # + gate_bias [heads, 1]
        y = op.Reshape(op.Mul(y, op.Sigmoid(gate)), op.Constant(value_ints=[0, 0, -1]))
        return self.o_proj(op, y), (present_key, present_value)


def depth_scaled_add(op, h: ir.Value, x: ir.Value, n: int) -> ir.Value:
    """The ``n``-th residual add: ``h / sqrt(n) + x * sqrt((n - 1) / n)``."""
    return op.Add(op.Mul(h, 1.0 / math.sqrt(n)), op.Mul(x, math.sqrt((n - 1) / n)))


class BeamDecoderLayer(nn.Module):
    """Sandwich-normed attention and MLP blocks with depth-scaled residual adds."""

    def __init__(self, config: BeamConfig, layer_idx: int) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.self_attn = BeamAttention(config)
        if config.mlp_layer_types[layer_idx] == "sparse":
            self.mlp = DeepseekV2MoE(config)
        else:
            self.mlp = GatedMLP(hidden, config.intermediate_size, config.hidden_act)
        self.input_layernorm = RMSNorm(hidden, eps)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.pre_feedforward_layernorm = RMSNorm(hidden, eps)
        self.post_feedforward_layernorm = RMSNorm(hidden, eps)
        self.attn_add = 2 * (layer_idx + 1)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.self_attn(
            op, self.input_layernorm(op, x), position_embeddings, bias, past_key, past_value
        )
        x = depth_scaled_add(op, self.post_attention_layernorm(op, h), x, self.attn_add)
        h = self.post_feedforward_layernorm(op, self.mlp(op, self.pre_feedforward_layernorm(op, x)))
        return depth_scaled_add(op, h, x, self.attn_add + 1), present


class BeamModel(LlamaModel):
    """RoPE on the layer types that have it, query scales on the others."""

    def __init__(self, config: BeamConfig) -> None:
        super().__init__(config)
        self.rope_kinds = sorted(k for k, r in config.rope_by_layer_type.items() if r is not None)
        self.rotary_emb = nn.ModuleList(
            [
                make_rotary_embedding(
                    config.rope_by_layer_type[kind], config.head_dim, config.max_position_embeddings
                )
                for kind in self.rope_kinds
            ]
        )

    def make_layer(self, config, layer_idx):
        return BeamDecoderLayer(config, layer_idx)

    def query_scales(self, op, position_ids: ir.Value) -> ir.Value:
        """``(1 + (position + 1) / 2048) ** 0.1`` as ``[batch, 1, seq, 1]`` (NoPE layers)."""
        p = op.Cast(position_ids, to=ir.DataType.FLOAT)
        scales = op.Exp(
            op.Mul(op.Log(op.Add(op.Div(op.Add(p, 1.0), SSMAX_LENGTH), 1.0)), SSMAX_POWER)
        )
        return op.Unsqueeze(scales, [1, 3])

    def position_embeddings(self, op, position_ids):
        """RoPE on the layer types that have it, query scales on the others."""
        position = {
            kind: self.query_scales(op, position_ids) for kind in self.config.rope_by_layer_type
        }
        for kind, rotary in zip(self.rope_kinds, self.rotary_emb, strict=True):
            position[kind] = rotary(op, position_ids)
        return position


class BeamForCausalLM(SoftcappedLogits, LlamaForCausalLM):
    """Beam causal LM; the logits are soft-capped when the config says so."""

    config_class = BeamConfig
    model_class = BeamModel


MODEL_TYPES = {"beam": BeamForCausalLM}
