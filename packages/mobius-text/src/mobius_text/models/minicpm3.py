"""MiniCPM3: DeepSeek-V2's multi-head latent attention in a dense, muP-scaled decoder.

MLA as DeepSeek-V2 (latent cache) but with rotate-half RoPE; input embeddings
times ``scale_emb``; each residual branch times ``scale_depth / sqrt(layers)``;
the final hidden states divided by ``hidden_size / dim_model_base`` before the
(tied by default) LM head.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mobius.components import DecoderLayer, Embedding, GatedMLP, RMSNorm
from mobius_text.models.deepseek_v2 import (
    DeepseekV2Config,
    DeepseekV2ForCausalLM,
    DeepseekV2Model,
)


@dataclass
class MiniCPM3Config(DeepseekV2Config):
    scale_emb: float = 1.0
    residual_scale: float = 1.0
    logits_scaling: float = 1.0

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(
            rope_layout="half",
            scale_emb=float(hf_config.scale_emb),
            residual_scale=hf_config.scale_depth / math.sqrt(hf_config.num_hidden_layers),
            logits_scaling=hf_config.hidden_size / hf_config.dim_model_base,
        )
        return fields


class ScaledEmbedding(Embedding):
    """Token lookup times a constant."""

    def __init__(self, num_embeddings: int, embedding_dim: int, scale: float) -> None:
        super().__init__(num_embeddings, embedding_dim)
        self.scale = scale

    def forward(self, op, ids):
        return op.Mul(super().forward(op, ids), self.scale)


class ScaledResidualDecoderLayer(DecoderLayer):
    """``x + scale * attn(norm(x))`` then ``x + scale * mlp(norm(x))``."""

    def __init__(self, *args, residual_scale: float) -> None:
        super().__init__(*args)
        self.residual_scale = residual_scale

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.self_attn(
            op, self.input_layernorm(op, x), position_embeddings, bias, past_key, past_value
        )
        x = op.Add(x, op.Mul(h, self.residual_scale))
        h = self.mlp(op, self.post_attention_layernorm(op, x))
        return op.Add(x, op.Mul(h, self.residual_scale)), present


class MiniCPM3Model(DeepseekV2Model):
    def __init__(self, config: MiniCPM3Config) -> None:
        super().__init__(config)
        self.embed_tokens = ScaledEmbedding(config.vocab_size, config.hidden_size, config.scale_emb)

    def make_layer(self, config, layer_idx):
        return ScaledResidualDecoderLayer(
            self.make_attention(config, layer_idx),
            GatedMLP(
                config.hidden_size, config.intermediate_size, config.hidden_act, config.mlp_bias
            ),
            RMSNorm(config.hidden_size, config.rms_norm_eps),
            RMSNorm(config.hidden_size, config.rms_norm_eps),
            residual_scale=config.residual_scale,
        )


class MiniCPM3ForCausalLM(DeepseekV2ForCausalLM):
    config_class = MiniCPM3Config
    model_class = MiniCPM3Model

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        hidden, presents = self.model(op, input_ids, attention_mask, position_ids, past_key_values)
        hidden = op.Div(hidden, self.config.logits_scaling)
        return self.lm_head(op, hidden), presents


MODEL_TYPES = {"minicpm3": MiniCPM3ForCausalLM}
