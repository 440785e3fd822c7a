"""GLM-4-MoE (GLM-4.5): GQA attention with partial RoPE and DeepSeek-V3 routed + shared experts.

Attention is Llama's with q/k/v biases (``attention_bias``) but no o_proj bias,
optional per-head q/k RMSNorm (``use_qk_norm``), and rotate-half RoPE over the
first ``partial_rotary_factor`` (default 0.5) of each head. The MoE blocks route
as DeepSeek-V3 does (sigmoid scores, ``e_score_correction_bias``, group-limited).
"""

from __future__ import annotations

from dataclasses import dataclass

from mobius.components import Attention, rotary_dim
from mobius_text.models.deepseek_v2 import DeepseekMoEConfig, DeepseekV2Model
from mobius_text.models.llama import LlamaForCausalLM
from mobius_text.models.qwen import QKNormAttention


@dataclass
class Glm4MoeConfig(DeepseekMoEConfig):
    use_qk_norm: bool = False

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(
            topk_method="noaux_tc", use_qk_norm=bool(getattr(hf_config, "use_qk_norm", False))
        )
        return fields


class Glm4MoeModel(DeepseekV2Model):
    """DeepSeek's dense/MoE layer layout with GQA attention (no output bias)."""

    def make_attention(self, config, layer_idx):
        args = (
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
        )
        kwargs = dict(
            bias=config.attention_bias,
            out_bias=False,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
        )
        if config.use_qk_norm:
            return QKNormAttention(*args, eps=config.rms_norm_eps, **kwargs)
        return Attention(*args, **kwargs)


class Glm4MoeForCausalLM(LlamaForCausalLM):
    config_class = Glm4MoeConfig
    model_class = Glm4MoeModel

    @property
    def ignored(self) -> tuple[str, ...]:
        """The multi-token-prediction layer GLM-4.5's checkpoints carry after the last decoder
        layer (``model.layers.{num_hidden_layers}``): generation does not read it, and
        transformers skips it by index."""
        return (*super().ignored, f"model.layers.{self.config.num_hidden_layers}.*")


MODEL_TYPES = {"glm4_moe": Glm4MoeForCausalLM}
