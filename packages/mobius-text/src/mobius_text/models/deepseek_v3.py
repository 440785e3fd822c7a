"""DeepSeek-V3: DeepSeek-V2's MLA with sigmoid, bias-corrected group-limited routing.

Routing (``noaux_tc``): sigmoid scores plus ``e_score_correction_bias`` choose the
experts within the ``topk_group`` best groups (ranked by the sum of their two best
corrected scores); the chosen experts are weighted by their uncorrected scores,
renormalised when ``norm_topk_prob``, times ``routed_scaling_factor``. RoPE pairs
are interleaved in the checkpoint and written out de-interleaved
(``rope_interleave``), or rotated as halves when that flag is off.
"""

from __future__ import annotations

from dataclasses import dataclass

from mobius_text.models.deepseek_v2 import DeepseekV2Config, DeepseekV2ForCausalLM


@dataclass
class DeepseekV3Config(DeepseekV2Config):
    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        fields.update(
            topk_method="noaux_tc",
            norm_topk_prob=bool(getattr(hf_config, "norm_topk_prob", False)),
            rope_layout="deinterleaved" if hf_config.rope_interleave else "half",
        )
        return fields


class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
    """DeepSeek-V3 causal LM (multi-token-prediction layers, when a checkpoint has them, are not used)."""

    config_class = DeepseekV3Config


# transformers builds Sarvam-MLA (sarvam-105b) with the DeepSeek-V3 classes, and saves it with their names.
MODEL_TYPES = {"deepseek_v3": DeepseekV3ForCausalLM, "sarvam_mla": DeepseekV3ForCausalLM}
