"""Ministral 3: Mistral with Llama 4's position-dependent query scaling.

After RoPE, queries are multiplied by
``1 + llama_4_scaling_beta * log(1 + floor(position / original_max_position_embeddings))``
(both read from ``rope_parameters``); the rotary schedule itself is usually YaRN.
As in Mistral, ``sliding_window`` (when set) applies to every layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Attention, apply_rotary, merge_heads, rotary_dim
from mobius_text.models.llama import LlamaForCausalLM, LlamaModel
from mobius_text.models.mistral import MistralConfig


@dataclass
class Ministral3Config(MistralConfig):
    llama_4_scaling_beta: float = 0.0
    llama_4_scaling_positions: int = 1  # rope's original_max_position_embeddings

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        rope_parameters = hf_config.rope_parameters or {}
        # MistralModel ignores layer_types: the window, when set, covers every layer.
        kind = "full_attention" if fields["sliding_window"] is None else "sliding_attention"
        fields["layer_types"] = [kind] * fields["num_hidden_layers"]
        # transformers requires both (its attention multiplies by them unconditionally).
        fields["llama_4_scaling_beta"] = float(rope_parameters["llama_4_scaling_beta"])
        fields["llama_4_scaling_positions"] = rope_parameters["original_max_position_embeddings"]
        return fields


class QueryScaledRotaryEmbedding(nn.Module):
    """Wraps a rotary module: returns ``(cos, sin, query_scale [batch, 1, seq, 1])``."""

    def __init__(self, rotary: nn.Module, beta: float, positions: int) -> None:
        super().__init__()
        self.rotary = rotary
        self.beta, self.positions = beta, positions

    def forward(self, op, position_ids: ir.Value):
        cos, sin = self.rotary(op, position_ids)
        position = op.Cast(position_ids, to=ir.DataType.FLOAT)
        blocks = op.Floor(op.Div(position, float(self.positions)))
        scale = op.Add(op.Mul(op.Log(op.Add(blocks, 1.0)), self.beta), 1.0)  # [batch, seq]
        return cos, sin, op.Unsqueeze(scale, [1, 3])


class QueryScaledAttention(Attention):
    """Attention that multiplies the rotated queries by a per-position scale."""

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        cos, sin, query_scale = position_embeddings
        q, k, v = self.project_qkv(op, x)
        q = apply_rotary(op, q, cos, sin, self.rotary_dim)
        k = apply_rotary(op, k, cos, sin, self.rotary_dim)
        q = op.Mul(q, op.CastLike(query_scale, q))
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        y = merge_heads(op, y)
        return self.o_proj(op, y), (present_key, present_value)


class Ministral3Model(LlamaModel):
    def __init__(self, config: Ministral3Config) -> None:
        super().__init__(config)
        self.rotary_emb = QueryScaledRotaryEmbedding(
            self.rotary_emb, config.llama_4_scaling_beta, config.llama_4_scaling_positions
        )

    def make_attention(self, config, layer_idx):
        return QueryScaledAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
        )


class Ministral3ForCausalLM(LlamaForCausalLM):
    """Ministral 3's causal LM: the Llama head over :class:`Ministral3Model`."""

    config_class = Ministral3Config
    model_class = Ministral3Model


MODEL_TYPES = {"ministral3": Ministral3ForCausalLM}
