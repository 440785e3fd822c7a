"""Gemma 3 (text): Gemma 2's layer with per-head query/key norms, a local rotary table for
sliding layers and a global (possibly scaled) one for full layers, and no attention soft-capping."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from mobius.components import Attention, make_rotary_embedding
from mobius.config import RopeConfig
from mobius_text.models.gemma import GemmaRMSNorm
from mobius_text.models.gemma2 import Gemma2Config, Gemma2ForCausalLM, Gemma2Model


@dataclass
class Gemma3TextConfig(Gemma2Config):
    # ``rope`` (inherited) holds the full-attention layers' schedule; sliding layers use this one.
    local_rope: RopeConfig = field(default_factory=RopeConfig)

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        # transformers 5 keeps one rope_parameters dict per layer type.
        params = hf_config.rope_parameters
        fields["rope"] = RopeConfig.from_hf(
            SimpleNamespace(rope_parameters=params["full_attention"])
        )
        fields["local_rope"] = RopeConfig.from_hf(
            SimpleNamespace(rope_parameters=params["sliding_attention"])
        )
        # Gemma 3's attention takes no soft-cap, whatever the config carries.
        fields["attn_logit_softcapping"] = None
        return fields


class Gemma3Attention(Attention):
    """Attention whose queries and keys are Gemma-RMS-normalised per head before RoPE."""

    def __init__(self, *args, eps: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.q_norm = GemmaRMSNorm(self.head_dim, eps)
        self.k_norm = GemmaRMSNorm(self.head_dim, eps)

    def project_qkv(self, op, x):
        q, k, v = super().project_qkv(op, x)  # [batch, heads, seq, head_dim]
        return self.q_norm(op, q), self.k_norm(op, k), v


class Gemma3TextModel(Gemma2Model):
    def __init__(self, config: Gemma3TextConfig) -> None:
        super().__init__(config)
        # The sliding layers' table; the inherited ``rotary_emb`` serves the full layers.
        self.local_rotary_emb = make_rotary_embedding(
            config.local_rope, config.head_dim, config.max_position_embeddings
        )

    def make_attention(self, config: Gemma3TextConfig, layer_idx: int) -> Attention:
        return Gemma3Attention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            scale=config.query_pre_attn_scalar**-0.5,
            eps=config.rms_norm_eps,
        )

    def position_embeddings(self, op, position_ids):
        tables = {"full_attention": self.rotary_emb, "sliding_attention": self.local_rotary_emb}
        return {
            kind: tables[kind](op, position_ids) for kind in dict.fromkeys(self.config.layer_types)
        }


class Gemma3ForCausalLM(Gemma2ForCausalLM):
    """Gemma 3 text causal LM (final logit soft-capping only when the config sets it)."""

    config_class = Gemma3TextConfig
    model_class = Gemma3TextModel


MODEL_TYPES = {"gemma3_text": Gemma3ForCausalLM}
