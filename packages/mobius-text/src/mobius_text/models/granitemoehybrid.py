"""Granite-MoE-Hybrid (Granite 4.0-H): Granite-MoE-Shared layers whose mixer is Mamba-2 or attention.

``layer_types`` picks each layer's mixer: ``linear_attention`` (Bamba's Mamba-2
mixer, conv and ssm states) or ``full_attention`` (Granite attention, KV cache,
RoPE only when ``position_embedding_type == "rope"``). Every layer then runs the
routed experts (when ``num_local_experts > 0``) plus the dense ``shared_mlp``,
and Granite's µP multipliers apply throughout: embeddings, residual branches,
attention scale and logits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxscript import nn

from mobius.components import (
    Attention,
    RMSNorm,
    make_rotary_embedding,
    rotary_dim,
)
from mobius_text.models.granite import ScaledEmbedding
from mobius_text.models.granitemoe import (
    GraniteMoeBlock,
    GraniteMoeConfig,
    GraniteMoeDecoderLayer,
    GraniteSharedMLP,
)
from mobius_text.models.llama import LlamaForCausalLM
from mobius_text.models.mamba import HybridModel
from mobius_text.models.mamba2 import Mamba2Config, Mamba2Mixer


@dataclass
class GraniteMoeHybridConfig(GraniteMoeConfig):
    layers_block_type: list[str] = field(default_factory=list)
    mamba: Mamba2Config | None = None

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        if hf_config.hidden_act != "silu":  # the Mamba-2 mixer's convolution uses hidden_act
            raise ValueError(f"granitemoehybrid with hidden_act={hf_config.hidden_act!r}")
        fields.update(
            layers_block_type=list(hf_config.layers_block_type),
            rope=fields["rope"] if hf_config.position_embedding_type == "rope" else None,
            num_local_experts=hf_config.num_local_experts or 0,
            mamba=Mamba2Config.from_hybrid(hf_config),
        )
        return fields


class GraniteMoeHybridDecoderLayer(GraniteMoeDecoderLayer):
    """``x + m * mixer(norm(x))``, then ``x + m * (moe(norm(x)) + shared_mlp(norm(x)))``."""

    def __init__(self, config: GraniteMoeHybridConfig, block_type: str) -> None:
        nn.Module.__init__(self)  # the mixer is attention or Mamba-2, and the MoE optional
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attends = block_type == "full_attention"
        if self.attends:
            rotary = rotary_dim(config.rope, config.head_dim) if config.rope else None
            self.self_attn = Attention(
                config.hidden_size,
                config.num_attention_heads,
                config.num_key_value_heads,
                config.head_dim,
                bias=config.attention_bias,
                out_bias=config.attention_bias,
                rotary_dim=rotary,
                scale=config.attention_multiplier,
            )
        else:
            self.mamba = Mamba2Mixer(config.mamba)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if config.num_local_experts > 0:
            self.block_sparse_moe = GraniteMoeBlock(config, config.intermediate_size)
        else:
            self.block_sparse_moe = None
        self.shared_mlp = GraniteSharedMLP(
            config.hidden_size, config.shared_intermediate_size, config.hidden_act
        )
        self.residual_multiplier = config.residual_multiplier

    def forward(self, op, x, rope, bias, real, past):
        h = self.input_layernorm(op, x)
        if self.attends:
            h, present = self.self_attn(op, h, rope, bias, *past)
        else:
            h, present = self.mamba(op, h, real, *past)
        x = op.Add(x, op.Mul(h, self.residual_multiplier))
        return op.Add(x, op.Mul(self.mlp_branch(op, x), self.residual_multiplier)), present


class GraniteMoeHybridModel(HybridModel):
    def __init__(self, config: GraniteMoeHybridConfig) -> None:
        super().__init__()
        self.embed_tokens = ScaledEmbedding(
            config.vocab_size, config.hidden_size, config.embedding_multiplier
        )
        self.layers = nn.ModuleList(
            [GraniteMoeHybridDecoderLayer(config, kind) for kind in config.layers_block_type]
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = (
            make_rotary_embedding(config.rope, config.head_dim, config.max_position_embeddings)
            if config.rope
            else None
        )


class GraniteMoeHybridForCausalLM(LlamaForCausalLM):
    """Logits divided by ``logits_scaling``."""

    config_class = GraniteMoeHybridConfig
    model_class = GraniteMoeHybridModel

    def cache_layout(self):
        c, m = self.config, self.config.mamba
        kv = ["batch", c.num_key_value_heads, "past_sequence", c.head_dim]
        mamba = m.state_layout()
        return [
            [("key", kv), ("value", kv)] if kind == "full_attention" else mamba
            for kind in c.layers_block_type
        ]

    def forward(self, op, input_ids, attention_mask, position_ids, past):
        logits, presents = super().forward(op, input_ids, attention_mask, position_ids, past)
        return op.Div(logits, self.config.logits_scaling), presents


MODEL_TYPES = {"granitemoehybrid": GraniteMoeHybridForCausalLM}
