"""Helium: Llama whose rotary embedding turns adjacent channel pairs (GPT-J layout), with
biased q/k/v projections when ``attention_bias`` is set but never a biased ``o_proj``."""

from __future__ import annotations

from mobius.components import Attention, rotary_dim
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


def apply_interleaved_rotary(op, x, cos, sin, rotary_dim: int):
    """Rotate channel pairs ``(0, 1), (2, 3)...`` of ``x [batch, heads, seq, head_dim]``."""
    cos, sin = op.CastLike(cos, x), op.CastLike(sin, x)
    return op.RotaryEmbedding(x, cos, sin, interleaved=1, rotary_embedding_dim=rotary_dim)


class InterleavedRotaryAttention(Attention):
    """Attention with the interleaved (pairwise) rotary layout."""

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)  # [batch, heads, seq, head_dim]
        cos, sin = position_embeddings
        q = apply_interleaved_rotary(op, q, cos, sin, self.rotary_dim)
        k = apply_interleaved_rotary(op, k, cos, sin, self.rotary_dim)
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        # y: [batch, heads, seq, head_dim] -> [batch, seq, heads*head_dim]
        y = op.Reshape(op.Transpose(y, perm=[0, 2, 1, 3]), op.Constant(value_ints=[0, 0, -1]))
        return self.o_proj(op, y), (present_key, present_value)


class HeliumModel(LlamaModel):
    def make_attention(self, config: LlamaConfig, layer_idx: int) -> Attention:
        return InterleavedRotaryAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=False,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
        )


class HeliumForCausalLM(LlamaForCausalLM):
    """Helium causal LM."""

    model_class = HeliumModel


MODEL_TYPES = {"helium": HeliumForCausalLM}
