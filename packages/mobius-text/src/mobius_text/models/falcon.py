"""Falcon: a fused ``query_key_value`` in three layouts, parallel attention, RoPE or ALiBi.

- old decoder architecture (Falcon-7B/RW): one ``input_layernorm``; with ``multi_query``
  one KV head shared by all query heads, else one per query head; with
  ``parallel_attn`` attention and MLP read the same normalised input and are summed.
- ``new_decoder_architecture`` (Falcon-40B/180B, Falcon2): grouped KV heads, the fused
  projection laid out per KV group as (queries of the group, key, value); attention
  and MLP in parallel, with separate norms ``ln_attn``/``ln_mlp`` unless
  ``num_ln_in_parallel_attn`` is 1.
- ``alibi`` (Falcon-RW): no rotary embedding; the ALiBi term is rounded to bfloat16
  (as transformers computes it) and divided by ``sqrt(head_dim)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import (
    Embedding,
    LayerNorm,
    attention_bias,
    make_rotary_embedding,
)
from mobius.config import ArchitectureConfig
from mobius_text.models._alibi import alibi_attention_bias, alibi_slopes, cumulative_positions
from mobius_text.models.bloom import DenseMLP, FusedQKVAttention
from mobius_text.models.llama import LlamaForCausalLM


@dataclass
class FalconConfig(ArchitectureConfig):
    new_decoder_architecture: bool = False
    multi_query: bool = True
    parallel_attn: bool = True
    bias: bool = False
    alibi: bool = False
    num_ln_in_parallel_attn: int | None = None

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        heads = hf_config.num_attention_heads
        new_arch = bool(hf_config.new_decoder_architecture)
        multi_query = bool(hf_config.multi_query)
        # New architecture: grouped KV heads; old: one shared (multi-query) or one per query head.
        kv_heads = hf_config.num_kv_heads if new_arch else (1 if multi_query else heads)
        num_ln = hf_config.num_ln_in_parallel_attn
        if num_ln is None and new_arch:
            num_ln = 2
        return {
            **fields,
            "num_key_value_heads": kv_heads,
            "head_dim": hf_config.hidden_size // heads,
            "intermediate_size": hf_config.ffn_hidden_size,
            "hidden_act": hf_config.activation,
            "rms_norm_eps": hf_config.layer_norm_epsilon,
            "rope": None if hf_config.alibi else fields["rope"],
            "layer_types": [],
            "sliding_window": None,
            "new_decoder_architecture": new_arch,
            "multi_query": multi_query,
            "parallel_attn": bool(hf_config.parallel_attn),
            "bias": bool(hf_config.bias),
            "alibi": bool(hf_config.alibi),
            "num_ln_in_parallel_attn": num_ln,
        }


class FalconAttention(FusedQKVAttention):
    """Falcon's fused projection: per head (q, k, v), or queries followed by shared keys and values."""

    def __init__(self, config: FalconConfig) -> None:
        super().__init__(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            qkv_bias=config.bias,
            out_bias=config.bias,
        )
        self.per_head_layout = not (config.new_decoder_architecture or config.multi_query)

    def split_qkv(self, op, qkv):
        if self.per_head_layout:
            return super().split_qkv(op, qkv)
        # Per KV group: its queries, then one key and one value (multi-query: a single group).
        group = self.num_heads // self.num_kv_heads
        shape = [0, 0, self.num_kv_heads, group + 2, self.head_dim]
        qkv = op.Reshape(qkv, op.Constant(value_ints=shape))
        q, k, v = op.Split(qkv, op.Constant(value_ints=[group, 1, 1]), axis=3, _outputs=3)
        q = op.Reshape(q, op.Constant(value_ints=[0, 0, self.num_heads, self.head_dim]))
        return q, op.Squeeze(k, [3]), op.Squeeze(v, [3])  # [batch, seq, (kv_)heads, head_dim]


class FalconDecoderLayer(nn.Module):
    def __init__(self, config: FalconConfig) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.config = config
        self.self_attention = FalconAttention(config)
        self.mlp = DenseMLP(hidden, config.intermediate_size, config.hidden_act, config.bias)
        self.two_norms = config.parallel_attn and config.num_ln_in_parallel_attn == 2
        if not config.parallel_attn:
            self.input_layernorm = LayerNorm(hidden, eps)
            self.post_attention_layernorm = LayerNorm(hidden, eps)
        elif self.two_norms:
            self.ln_attn = LayerNorm(hidden, eps)
            self.ln_mlp = LayerNorm(hidden, eps)
        else:
            self.input_layernorm = LayerNorm(hidden, eps)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        if self.two_norms:
            attn_in, mlp_in = self.ln_attn(op, x), self.ln_mlp(op, x)
        else:
            attn_in = mlp_in = self.input_layernorm(op, x)
        attn, present = self.self_attention(
            op, attn_in, position_embeddings, bias, past_key, past_value
        )
        if not self.config.parallel_attn:  # sequential: the MLP sees the attention's output
            x = op.Add(x, attn)
            return op.Add(x, self.mlp(op, self.post_attention_layernorm(op, x))), present
        return op.Add(x, op.Add(self.mlp(op, mlp_in), attn)), present


def falcon_alibi(op, attention_mask, num_heads: int, head_dim: int) -> ir.Value:
    """``bf16(bf16(slope) * bf16(position)) / sqrt(head_dim)`` as float32 ``[batch, heads, 1, total]``.

    transformers multiplies bfloat16 slopes by the integer positions, which rounds
    positions and product to bfloat16; Cast to bfloat16 and back reproduces it.
    """
    slopes = alibi_slopes(num_heads).astype(ml_dtypes.bfloat16).astype(np.float32)

    def to_bf16(value):
        return op.Cast(op.Cast(value, to=ir.DataType.BFLOAT16), to=ir.DataType.FLOAT)

    positions = to_bf16(op.Cast(cumulative_positions(op, attention_mask), to=ir.DataType.FLOAT))
    positions = op.Unsqueeze(positions, [1, 2])  # [batch, 1, 1, total]
    per_head = op.Constant(value=ir.tensor(slopes.reshape(-1, 1, 1)))
    return op.Div(to_bf16(op.Mul(positions, per_head)), math.sqrt(head_dim))


class FalconModel(nn.Module):
    """HF ``transformer.*``: ``word_embeddings``, blocks ``h``, final ``ln_f``."""

    def __init__(self, config: FalconConfig) -> None:
        super().__init__()
        self.config = config
        self.word_embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.h = nn.ModuleList(
            [FalconDecoderLayer(config) for _ in range(config.num_hidden_layers)]
        )
        self.ln_f = LayerNorm(config.hidden_size, config.rms_norm_eps)
        if not config.alibi:
            self.rotary_emb = make_rotary_embedding(
                config.rope, config.head_dim, config.max_position_embeddings
            )

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        c = self.config
        x = self.word_embeddings(op, input_ids)
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        if c.alibi:
            cos_sin = None
            linear_bias = falcon_alibi(op, attention_mask, c.num_attention_heads, c.head_dim)
            bias = alibi_attention_bias(op, attention_mask, seq_len, x.dtype, linear_bias)
        else:
            cos_sin = self.rotary_emb(op, position_ids)
            bias = attention_bias(op, attention_mask, seq_len, x.dtype)
        presents = []
        for layer, (past_key, past_value) in zip(self.h, past_key_values, strict=True):
            x, present = layer(op, x, cos_sin, bias, past_key, past_value)
            presents.append(present)
        return self.ln_f(op, x), presents


class FalconForCausalLM(LlamaForCausalLM):
    """The causal LM: ``transformer`` plus an ``lm_head`` (tied to the embeddings by default)."""

    config_class = FalconConfig
    model_class = FalconModel
    backbone_name = "transformer"

    def input_embedding(self):
        return self.transformer.word_embeddings


MODEL_TYPES = {"falcon": FalconForCausalLM}
