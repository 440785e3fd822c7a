"""Granite SWA: Granite with sliding-window layers, attention sinks and a RoPE base per layer.

- ``layer_types`` (default: every fourth layer, from 0, full; the rest sliding);
- every attention head has a learned sink logit ``self_attn.sinks [heads]``; as
  transformers writes it, the softmax output is scaled by ``sigmoid(lse - sink)``
  where ``lse`` is the log-sum-exp of the (masked) scores of that query;
- ``layer_rope_theta`` gives each layer its RoPE base; ``0`` means no positional
  encoding for that layer (NoPE).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from onnxscript import nn

from mobius.components import (
    Attention,
    attention_bias,
    make_rotary_embedding,
    repeat_kv,
    rotary_dim,
)
from mobius_text.models.granite import GraniteConfig, GraniteForCausalLM, GraniteModel


@dataclass
class GraniteSWAConfig(GraniteConfig):
    # RoPE base of each layer; 0 for a layer without positional encoding.
    layer_rope_theta: list[float] = field(default_factory=list)

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields["layer_types"] = list(hf_config.layer_types)
        fields["layer_rope_theta"] = [float(theta) for theta in hf_config.layer_rope_theta]
        return fields


class SigmoidSinkAttention(Attention):
    """Attention whose output is scaled per query by ``sigmoid(logsumexp(scores) - sink)``."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sinks = nn.Parameter([self.num_heads])

    def attend(self, op, q, k, v, bias, past_key, past_value):
        key = op.Concat(past_key, k, axis=2)  # [batch, kv_heads, total, head_dim]
        value = op.Concat(past_value, v, axis=2)
        heads, kv_heads, dim = self.num_heads, self.num_kv_heads, self.head_dim
        keys = repeat_kv(op, key, heads, kv_heads, dim)  # [batch, heads, total, head_dim]
        values = repeat_kv(op, value, heads, kv_heads, dim)
        scores = op.Mul(op.MatMul(q, op.Transpose(keys, perm=[0, 1, 3, 2])), self.scale)
        scores = op.Add(scores, bias)  # [batch, heads, seq, total]
        lse = op.ReduceLogSumExp(scores, [-1], keepdims=1)  # [batch, heads, seq, 1]
        sinks = op.Reshape(self.sinks, op.Constant(value_ints=[1, heads, 1, 1]))
        sink_scale = op.Sigmoid(op.Sub(lse, sinks))
        y = op.MatMul(op.Softmax(scores, axis=-1), values)  # [batch, heads, seq, head_dim]
        return op.Mul(y, sink_scale), key, value


class GraniteSWAModel(GraniteModel):
    def __init__(self, config: GraniteSWAConfig) -> None:
        super().__init__(config)
        self.thetas = sorted({theta for theta in config.layer_rope_theta if theta})
        self.rotary_emb = nn.ModuleList(
            [
                make_rotary_embedding(
                    dataclasses.replace(config.rope, theta=theta),
                    config.head_dim,
                    config.max_position_embeddings,
                )
                for theta in self.thetas
            ]
        )

    def make_attention(self, config, layer_idx):
        return SigmoidSinkAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            scale=config.attention_multiplier,
        )

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        x = self.embed_tokens(op, input_ids)  # [batch, seq, hidden], times embedding_multiplier
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        windows = {"full_attention": None, "sliding_attention": self.config.sliding_window}
        biases = {
            kind: attention_bias(op, attention_mask, seq_len, x.dtype, windows[kind])
            for kind in sorted(set(self.config.layer_types))
        }
        rope = {
            theta: rotary(op, position_ids)
            for theta, rotary in zip(self.thetas, self.rotary_emb, strict=True)
        }
        presents = []
        for i, (layer, (past_key, past_value)) in enumerate(
            zip(self.layers, past_key_values, strict=True)
        ):
            theta = self.config.layer_rope_theta[i]
            bias = biases[self.config.layer_types[i]]
            x, present = layer(op, x, rope[theta] if theta else None, bias, past_key, past_value)
            presents.append(present)
        return self.norm(op, x), presents


class GraniteSWAForCausalLM(GraniteForCausalLM):
    """Granite SWA's causal LM: Granite's head (logits / ``logits_scaling``)."""

    config_class = GraniteSWAConfig
    model_class = GraniteSWAModel


MODEL_TYPES = {"granite_swa": GraniteSWAForCausalLM}
