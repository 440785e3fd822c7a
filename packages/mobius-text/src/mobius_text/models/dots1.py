"""dots.llm1: Qwen3 attention (per-head q/k RMSNorm, optional sliding windows) with DeepSeek-V3 MoE.

Layers from ``max_window_layers`` on use sliding-window attention when the config
has a window (HF's ``layer_types``); MoE blocks route as DeepSeek-V3 does.
"""

from __future__ import annotations

from dataclasses import dataclass

from mobius.components import rotary_dim
from mobius_text.models.deepseek_v2 import DeepseekMoEConfig, DeepseekV2Model
from mobius_text.models.llama import LlamaForCausalLM
from mobius_text.models.qwen import QKNormAttention


@dataclass
class Dots1Config(DeepseekMoEConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        return {**super().hf_fields(hf_config), "topk_method": "noaux_tc"}


class Dots1Model(DeepseekV2Model):
    def make_attention(self, config, layer_idx):
        return QKNormAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            eps=config.rms_norm_eps,
        )


class Dots1ForCausalLM(LlamaForCausalLM):
    config_class = Dots1Config
    model_class = Dots1Model


MODEL_TYPES = {"dots1": Dots1ForCausalLM}
