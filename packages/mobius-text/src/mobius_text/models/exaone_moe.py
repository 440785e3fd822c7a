"""EXAONE-MoE (K-EXAONE): EXAONE 4 attention with DeepSeek-V3 routed + shared experts.

Attention normalises queries and keys per head (before RoPE). With a sliding
window, the sliding layers use RoPE and the global layers none (NoPE). The MoE
blocks route as DeepSeek-V3, but checkpoints keep ``e_score_correction_bias`` on
the block (``mlp.e_score_correction_bias``), not on its router.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir
from onnxscript import nn

from mobius.components import rotary_dim
from mobius_text.models.deepseek_v2 import (
    DeepseekMoEConfig,
    DeepseekV2Model,
    DeepseekV2MoE,
    DeepseekV2Router,
)
from mobius_text.models.llama import LlamaForCausalLM
from mobius_text.models.qwen import QKNormAttention


@dataclass
class ExaoneMoeConfig(DeepseekMoEConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "topk_method": "noaux_tc",
            "n_shared_experts": hf_config.num_shared_experts,
            "attention_bias": False,
            "mlp_bias": False,
        }


class ExaoneMoeSparseMoEBlock(DeepseekV2MoE):
    """DeepSeek-V3's MoE block with the correction bias held by the block."""

    def __init__(self, config: ExaoneMoeConfig) -> None:
        super().__init__(config)
        self.gate = DeepseekV2Router(config, owns_correction_bias=False)
        self.e_score_correction_bias = nn.Parameter([config.n_routed_experts])

    def route(self, op, flat: ir.Value) -> ir.Value:
        # Read here, in the block's scope, so the parameter keeps the block's name.
        bias = op.Cast(self.e_score_correction_bias, to=ir.DataType.FLOAT)
        return self.gate(op, flat, bias)


class ExaoneMoeModel(DeepseekV2Model):
    def make_attention(self, config, layer_idx):
        return QKNormAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            eps=config.rms_norm_eps,
        )

    def make_mlp(self, config, layer_idx):
        if config.mlp_layer_types[layer_idx] == "sparse":
            return ExaoneMoeSparseMoEBlock(config)
        return super().make_mlp(config, layer_idx)

    def layer_uses_rope(self, layer_idx: int) -> bool:
        # Global layers of a hybrid (sliding window) model are NoPE.
        c = self.config
        return c.sliding_window is None or c.layer_types[layer_idx] == "sliding_attention"


class ExaoneMoeForCausalLM(LlamaForCausalLM):
    config_class = ExaoneMoeConfig
    model_class = ExaoneMoeModel


MODEL_TYPES = {"exaone_moe": ExaoneMoeForCausalLM}
