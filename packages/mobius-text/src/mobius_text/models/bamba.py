"""Bamba: a hybrid of Mamba-2 mixers and Llama attention layers, each followed by a gated MLP.

``layers_block_type`` says which layers attend (``full_attention``, with a KV
cache) and which run the Mamba-2 mixer (``linear_attention``, with conv and ssm
states). The cache layout follows the same per-layer choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from onnxscript import nn

from mobius.components import (
    Attention,
    Embedding,
    GatedMLP,
    RMSNorm,
    make_rotary_embedding,
    rotary_dim,
)
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM
from mobius_text.models.mamba import HybridDecoderLayer, HybridModel
from mobius_text.models.mamba2 import Mamba2Config, Mamba2Mixer


@dataclass
class BambaConfig(LlamaConfig):
    layers_block_type: list[str] = field(default_factory=list)
    mamba: Mamba2Config | None = None

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields["layers_block_type"] = list(hf_config.layers_block_type)
        fields["mamba"] = Mamba2Config.from_hybrid(hf_config)
        return fields


class BambaDecoderLayer(HybridDecoderLayer):
    """``x + mixer(norm(x))`` with a Mamba-2 mixer or attention, then ``x + mlp(norm(x))``."""

    def __init__(self, config: BambaConfig, attends: bool) -> None:
        super().__init__(attends)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        if attends:
            self.self_attn = Attention(
                config.hidden_size,
                config.num_attention_heads,
                config.num_key_value_heads,
                config.head_dim,
                bias=config.attention_bias,
                out_bias=config.attention_bias,
                rotary_dim=rotary_dim(config.rope, config.head_dim),
            )
        else:
            self.mamba = Mamba2Mixer(config.mamba)
        self.pre_ff_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.feed_forward = GatedMLP(
            config.hidden_size, config.intermediate_size, config.hidden_act, config.mlp_bias
        )


class BambaModel(HybridModel):
    norm_name = "final_layernorm"

    def __init__(self, config: BambaConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            [
                BambaDecoderLayer(config, kind == "full_attention")
                for kind in config.layers_block_type
            ]
        )
        self.final_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = make_rotary_embedding(
            config.rope, config.head_dim, config.max_position_embeddings
        )


class BambaForCausalLM(LlamaForCausalLM):
    config_class = BambaConfig
    model_class = BambaModel

    def cache_layout(self):
        c, m = self.config, self.config.mamba
        attention = [
            ("key", ["batch", c.num_key_value_heads, "past_sequence", c.head_dim]),
            ("value", ["batch", c.num_key_value_heads, "past_sequence", c.head_dim]),
        ]
        mamba = m.state_layout()
        return [attention if k == "full_attention" else mamba for k in c.layers_block_type]


MODEL_TYPES = {"bamba": BambaForCausalLM}
