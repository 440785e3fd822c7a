"""EXAONE 4: post-norm layers (norm after attention and after the MLP, none before),
per-head q/k RMS norms, and sliding layers with RoPE next to global layers without it."""

from __future__ import annotations

from dataclasses import dataclass

from mobius.components import GatedMLP, RMSNorm
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel
from mobius_text.models.olmo2 import PostNormDecoderLayer
from mobius_text.models.qwen import QKNormAttention


@dataclass
class Exaone4Config(LlamaConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        # EXAONE 4's projections carry no biases, whatever stray config keys say.
        return {**super().hf_fields(hf_config), "attention_bias": False, "mlp_bias": False}


class Exaone4Model(LlamaModel):
    def make_attention(self, config: Exaone4Config, layer_idx: int) -> QKNormAttention:
        return QKNormAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            eps=config.rms_norm_eps,
        )

    def make_layer(self, config: Exaone4Config, layer_idx: int) -> PostNormDecoderLayer:
        return PostNormDecoderLayer(
            self.make_attention(config, layer_idx),
            GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act),
            RMSNorm(config.hidden_size, config.rms_norm_eps),
            RMSNorm(config.hidden_size, config.rms_norm_eps),
        )

    def layer_uses_rope(self, layer_idx: int) -> bool:
        # With a sliding window, only the sliding layers rotate; without one, every layer does.
        config = self.config
        return config.sliding_window is None or config.layer_types[layer_idx] == "sliding_attention"


class Exaone4ForCausalLM(LlamaForCausalLM):
    """EXAONE 4 causal LM."""

    config_class = Exaone4Config
    model_class = Exaone4Model


MODEL_TYPES = {"exaone4": Exaone4ForCausalLM}
