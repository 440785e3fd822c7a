"""MiMo-V2-Flash: GQA with narrower values, sink-softmax sliding layers, DeepSeek-V3 routing.

What differs from Llama:

- values have their own head size (``v_head_dim``) and are scaled by
  ``attention_value_scale`` before the cache; o_proj has no bias;
- sliding-window layers have twice the KV heads and a learned sink logit per head
  that joins the softmax (``self_attn.attention_sink_bias`` in checkpoints);
- RoPE settings per layer type, each rotating a fraction (``partial_rotary_factor``)
  of the head;
- MoE layers (``mlp_layer_types``) route as DeepSeek-V3 does, with no shared expert.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from onnxscript import nn

from mobius.components import (
    Attention,
    Linear,
    repeat_kv,
    rotary_dim,
    split_heads,
)
from mobius.config import RopeConfig
from mobius_text.models.deepseek_v2 import DeepseekMoEConfig, DeepseekV2MoE
from mobius_text.models.laguna import LagunaModel
from mobius_text.models.llama import LlamaForCausalLM


@dataclass
class MiMoV2FlashConfig(DeepseekMoEConfig):
    """DeepSeek's MoE layout plus the value head size and scale and RoPE per layer type."""

    v_head_dim: int = 0
    attention_value_scale: float = 1.0
    rope_by_layer_type: dict[str, RopeConfig] = field(default_factory=dict)

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        by_kind = {
            kind: RopeConfig.from_hf(
                SimpleNamespace(rope_parameters=hf_config.rope_parameters[kind])
            )
            for kind in set(fields["layer_types"])
        }
        scale = hf_config.attention_value_scale
        fields.update(
            topk_method="noaux_tc",
            n_shared_experts=0,
            v_head_dim=hf_config.v_head_dim,
            attention_value_scale=1.0 if scale is None else float(scale),
            rope_by_layer_type=by_kind,
            rope=next(iter(by_kind.values())),
        )
        return fields

    def kv_heads(self, layer_idx: int) -> int:
        sliding = self.layer_types[layer_idx] == "sliding_attention"
        return self.num_key_value_heads * (2 if sliding else 1)


class MiMoV2FlashAttention(Attention):
    """GQA with ``v_head_dim`` values scaled by ``attention_value_scale``; optional sink logits."""

    def __init__(self, config: MiMoV2FlashConfig, layer_idx: int) -> None:
        kv_heads, heads = config.kv_heads(layer_idx), config.num_attention_heads
        rope = config.rope_by_layer_type[config.layer_types[layer_idx]]
        super().__init__(
            config.hidden_size,
            heads,
            kv_heads,
            config.head_dim,
            bias=config.attention_bias,
            rotary_dim=rotary_dim(rope, config.head_dim),
        )
        self.v_dim, self.v_scale = config.v_head_dim, config.attention_value_scale
        self.v_proj = Linear(config.hidden_size, kv_heads * self.v_dim, config.attention_bias)
        self.o_proj = Linear(heads * self.v_dim, config.hidden_size)
        if config.layer_types[layer_idx] == "sliding_attention":
            self.attention_sink_bias = nn.Parameter([heads])
        else:
            self.attention_sink_bias = None

    def project_qkv(self, op, x):
        q = self.split_heads(op, self.q_proj(op, x))  # [batch, heads, seq, head_dim]
        k = self.split_heads(op, self.k_proj(op, x))
        v = split_heads(op, self.v_proj(op, x), head_dim=self.v_dim)  # [batch, kv, seq, v_dim]
        v = op.Mul(v, self.v_scale)
        return q, k, v

    def attention_shape(self) -> dict:
        return {**super().attention_shape(), "value_dim": self.v_dim}

    def attend(self, op, q, k, v, bias, past_key, past_value):
        if self.attention_sink_bias is None:
            return super().attend(op, q, k, v, bias, past_key, past_value)
        key = op.Concat(past_key, k, axis=2)  # [batch, kv_heads, total, head_dim]
        value = op.Concat(past_value, v, axis=2)  # [batch, kv_heads, total, v_dim]
        heads, kv_heads = self.num_heads, self.num_kv_heads
        keys = repeat_kv(op, key, heads, kv_heads, self.head_dim)
        values = repeat_kv(op, value, heads, kv_heads, self.v_dim)
        scores = op.Mul(op.MatMul(q, op.Transpose(keys, perm=[0, 1, 3, 2])), self.scale)
        scores = op.Add(scores, bias)  # [batch, heads, seq, total]
        sink_shape = op.Concat(op.Shape(scores, end=3), op.Constant(value_ints=[1]), axis=0)
        sinks = op.Expand(
            op.Reshape(op.CastLike(self.attention_sink_bias, scores), [1, heads, 1, 1]),
            sink_shape,
        )
        probs = op.Softmax(op.Concat(scores, sinks, axis=-1), axis=-1)
        probs = op.Slice(probs, [0], [-1], [3])  # drop the sink column
        return op.MatMul(probs, values), key, value


class MiMoV2FlashModel(LagunaModel):
    """Laguna's per-layer-type RoPE and masks, with MiMo's attention and MoE."""

    def make_attention(self, config, layer_idx):
        return MiMoV2FlashAttention(config, layer_idx)

    def make_moe(self, config) -> nn.Module:
        return DeepseekV2MoE(config)


class MiMoV2FlashForCausalLM(LlamaForCausalLM):
    """MiMo-V2-Flash causal LM (multi-token-prediction layers, when a checkpoint has them, are not used)."""

    config_class = MiMoV2FlashConfig
    model_class = MiMoV2FlashModel
    ignored = ("model.mtp.*",)  # multi-token-prediction heads: not part of the LM

    def kv_cache_shapes(self) -> list[tuple[int, int, int]]:
        c = self.config
        return [(c.kv_heads(i), c.head_dim, c.v_head_dim) for i in range(c.num_hidden_layers)]


MODEL_TYPES = {"mimo_v2_flash": MiMoV2FlashForCausalLM}
