"""Bloom: ALiBi instead of positions, a fused per-head query/key/value projection, LayerNorms.

The embeddings are layer-normalised (``word_embeddings_layernorm``) before the
first block; ``apply_residual_connection_post_layernorm`` makes each residual
branch start from the normalised input instead of the raw one.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import (
    Attention,
    Embedding,
    LayerNorm,
    Linear,
    apply_rotary,
    get_activation,
    merge_heads,
)
from mobius.config import ArchitectureConfig
from mobius_text.models._alibi import (
    alibi,
    alibi_attention_bias,
    alibi_slopes,
    cumulative_positions,
)
from mobius_text.models.llama import LlamaForCausalLM


@dataclass
class BloomConfig(ArchitectureConfig):
    apply_residual_connection_post_layernorm: bool = False

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        hidden, heads = hf_config.hidden_size, hf_config.n_head
        return {
            **fields,
            # Bloom has one KV head per query head and a fixed 4x MLP, whatever else the config holds.
            "num_key_value_heads": heads,
            "head_dim": hidden // heads,
            "intermediate_size": 4 * hidden,
            "hidden_act": "gelu_tanh",  # Bloom's GELU is the tanh approximation
            "rms_norm_eps": hf_config.layer_norm_epsilon,
            "rope": None,
            "layer_types": [],
            "sliding_window": None,
            "apply_residual_connection_post_layernorm": bool(
                hf_config.apply_residual_connection_post_layernorm
            ),
        }


class FusedQKVAttention(Attention):
    """Attention whose checkpoint fuses q, k and v into ``query_key_value`` and names the output ``dense``.

    The fused output is laid out per head as (q, k, v) (Bloom, Persimmon, Falcon
    with one KV head per query head); other layouts override :meth:`split_qkv`.
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        qkv_bias: bool = True,
        out_bias: bool = True,
        rotary_dim: int | None = None,
    ) -> None:
        nn.Module.__init__(self)  # no separate q/k/v projections: the checkpoint fuses them
        fused_size = (num_heads + 2 * num_kv_heads) * head_dim
        self.query_key_value = Linear(hidden_size, fused_size, qkv_bias)
        self.dense = Linear(num_heads * head_dim, hidden_size, out_bias)
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.rotary_dim = head_dim if rotary_dim is None else rotary_dim
        self.scale = head_dim**-0.5

    def split_qkv(self, op, qkv):
        """``[batch, seq, heads*3*head_dim]`` → q, k, v ``[batch, seq, heads, head_dim]``."""
        qkv = op.Reshape(qkv, op.Constant(value_ints=[0, 0, self.num_heads, 3, self.head_dim]))
        # each [batch, seq, heads, 1, head_dim]
        q, k, v = op.Split(qkv, axis=3, num_outputs=3, _outputs=3)
        return tuple(op.Squeeze(t, [3]) for t in (q, k, v))

    def project_qkv(self, op, x):
        q, k, v = self.split_qkv(op, self.query_key_value(op, x))
        return tuple(op.Transpose(t, perm=[0, 2, 1, 3]) for t in (q, k, v))

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)  # [batch, heads, seq, head_dim]
        if position_embeddings is not None:  # None: ALiBi models
            cos, sin = position_embeddings
            q = apply_rotary(op, q, cos, sin, self.rotary_dim)
            k = apply_rotary(op, k, cos, sin, self.rotary_dim)
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        y = merge_heads(op, y)
        return self.dense(op, y), (present_key, present_value)


class DenseMLP(nn.Module):
    """``dense_4h_to_h(act(dense_h_to_4h(x)))``: the two-layer MLP under Megatron's names."""

    def __init__(self, hidden_size: int, intermediate_size: int, act: str, bias: bool = True):
        super().__init__()
        self.dense_h_to_4h = Linear(hidden_size, intermediate_size, bias)
        self.dense_4h_to_h = Linear(intermediate_size, hidden_size, bias)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.dense_4h_to_h(op, self.act(op, self.dense_h_to_4h(op, x)))


class BloomBlock(nn.Module):
    def __init__(self, config: BloomConfig) -> None:
        super().__init__()
        eps = config.rms_norm_eps
        self.input_layernorm = LayerNorm(config.hidden_size, eps)
        heads = config.num_attention_heads
        self.self_attention = FusedQKVAttention(config.hidden_size, heads, heads, config.head_dim)
        self.post_attention_layernorm = LayerNorm(config.hidden_size, eps)
        self.mlp = DenseMLP(config.hidden_size, config.intermediate_size, config.hidden_act)
        self.residual_from_norm = config.apply_residual_connection_post_layernorm

    def forward(self, op, x, bias, past_key, past_value):
        h = self.input_layernorm(op, x)
        attn, present = self.self_attention(op, h, None, bias, past_key, past_value)
        x = op.Add(h if self.residual_from_norm else x, attn)
        h = self.post_attention_layernorm(op, x)
        x = op.Add(h if self.residual_from_norm else x, self.mlp(op, h))
        return x, present


class BloomModel(nn.Module):
    """HF ``transformer.*``: embeddings and their LayerNorm, the blocks ``h``, the final ``ln_f``."""

    def __init__(self, config: BloomConfig) -> None:
        super().__init__()
        self.config = config
        self.word_embeddings = Embedding(config.vocab_size, config.hidden_size)
        self.word_embeddings_layernorm = LayerNorm(config.hidden_size, config.rms_norm_eps)
        self.h = nn.ModuleList([BloomBlock(config) for _ in range(config.num_hidden_layers)])
        self.ln_f = LayerNorm(config.hidden_size, config.rms_norm_eps)
        self.slopes = alibi_slopes(config.num_attention_heads)

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        # ALiBi models derive positions from attention_mask; position_ids is part of the contract only.
        x = self.word_embeddings_layernorm(op, self.word_embeddings(op, input_ids))
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        # ALiBi on the real-token count, so a left-padded row starts at position 0.
        linear_bias = alibi(op, self.slopes, cumulative_positions(op, attention_mask))
        bias = alibi_attention_bias(op, attention_mask, seq_len, x.dtype, linear_bias)
        presents = []
        for block, (past_key, past_value) in zip(self.h, past_key_values, strict=True):
            x, present = block(op, x, bias, past_key, past_value)
            presents.append(present)
        return self.ln_f(op, x), presents


class BloomForCausalLM(LlamaForCausalLM):
    """The causal LM: ``transformer`` plus an ``lm_head`` (tied to the embeddings by default)."""

    config_class = BloomConfig
    model_class = BloomModel
    backbone_name = "transformer"

    def input_embedding(self):
        return self.transformer.word_embeddings


MODEL_TYPES = {"bloom": BloomForCausalLM}
