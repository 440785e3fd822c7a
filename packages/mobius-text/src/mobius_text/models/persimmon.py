"""Persimmon: LayerNorm decoder with a fused per-head QKV, per-head q/k LayerNorm, partial RoPE, relu² MLP."""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import (
    DecoderLayer,
    Embedding,
    LayerNorm,
    attention_bias,
    make_rotary_embedding,
    rotary_dim,
)
from mobius.config import ArchitectureConfig
from mobius_text.models.bloom import DenseMLP, FusedQKVAttention
from mobius_text.models.llama import LlamaForCausalLM


@dataclass
class PersimmonConfig(ArchitectureConfig):
    qk_layernorm: bool = True

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        heads = hf_config.num_attention_heads
        return {
            **fields,
            "num_key_value_heads": heads,  # multi-head only
            "head_dim": hf_config.hidden_size // heads,
            "rms_norm_eps": hf_config.layer_norm_eps,
            "qk_layernorm": bool(hf_config.qk_layernorm),
        }


class PersimmonAttention(FusedQKVAttention):
    """Fused per-head (q, k, v); queries and keys LayerNorm-ed over ``head_dim`` before RoPE."""

    def __init__(self, config: PersimmonConfig) -> None:
        heads, head_dim = config.num_attention_heads, config.head_dim
        super().__init__(
            config.hidden_size,
            heads,
            heads,
            head_dim,
            rotary_dim=rotary_dim(config.rope, head_dim),
        )
        self.qk_layernorm = config.qk_layernorm
        if config.qk_layernorm:
            self.q_layernorm = LayerNorm(head_dim, config.rms_norm_eps)
            self.k_layernorm = LayerNorm(head_dim, config.rms_norm_eps)

    def split_qkv(self, op, qkv):
        q, k, v = super().split_qkv(op, qkv)  # [batch, seq, heads, head_dim]
        if self.qk_layernorm:
            q, k = self.q_layernorm(op, q), self.k_layernorm(op, k)
        return q, k, v


class PersimmonModel(nn.Module):
    """HF ``model.*``: ``embed_tokens``, ``layers``, ``final_layernorm``."""

    def __init__(self, config: PersimmonConfig) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.embed_tokens = Embedding(config.vocab_size, hidden)
        self.layers = nn.ModuleList(
            [
                DecoderLayer(
                    self_attn=PersimmonAttention(config),
                    mlp=DenseMLP(hidden, config.intermediate_size, config.hidden_act),
                    input_layernorm=LayerNorm(hidden, eps),
                    post_attention_layernorm=LayerNorm(hidden, eps),
                )
                for _ in range(config.num_hidden_layers)
            ]
        )
        self.final_layernorm = LayerNorm(hidden, eps)
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.head_dim, config.max_position_embeddings
        )

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        x = self.embed_tokens(op, input_ids)
        cos_sin = self.rotary_emb(op, position_ids)
        seq_len = op.Squeeze(op.Slice(op.Shape(input_ids), [1], [2]), [0])
        bias = attention_bias(op, attention_mask, seq_len, x.dtype)
        presents = []
        for layer, (past_key, past_value) in zip(self.layers, past_key_values, strict=True):
            x, present = layer(op, x, cos_sin, bias, past_key, past_value)
            presents.append(present)
        return self.final_layernorm(op, x), presents


class PersimmonForCausalLM(LlamaForCausalLM):
    config_class = PersimmonConfig
    model_class = PersimmonModel


MODEL_TYPES = {"persimmon": PersimmonForCausalLM}
