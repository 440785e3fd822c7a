"""GLM-MoE-DSA (GLM-5): DeepSeek-V3.2's sparse attention with interleaved indexer RoPE
and selections shared across layers.

What differs from DeepSeek-V3.2:

- the indexer rotates the interleaved channel pairs of its first ``qk_rope_head_dim``
  channels (V3.2 rotates halves);
- ``indexer_types[i] == "shared"`` layers have no indexer (and no indexer cache): they
  attend to the keys the previous layer selected.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx_ir as ir

from mobius_text.models.deepseek_v2 import rotate
from mobius_text.models.deepseek_v32 import (
    DeepseekV32Attention,
    DeepseekV32Config,
    DeepseekV32ForCausalLM,
    DeepseekV32Indexer,
    DeepseekV32Model,
)


@dataclass
class GlmMoeDsaConfig(DeepseekV32Config):
    """DeepSeek-V3.2's fields plus which layers run their own indexer."""

    indexer_types: list[str] = field(default_factory=list)

    @classmethod
    def hf_fields(cls, hf_config):
        return {**super().hf_fields(hf_config), "indexer_types": list(hf_config.indexer_types)}

    def has_indexer(self, layer_idx: int) -> bool:
        return self.indexer_types[layer_idx] == "full"


class GlmMoeDsaIndexer(DeepseekV32Indexer):
    """The DeepSeek-V3.2 indexer with interleaved-pair RoPE."""

    def rotate(self, op, x: ir.Value, cos: ir.Value, sin: ir.Value) -> ir.Value:
        """Interleaved-pair RoPE (written out de-interleaved) on the first ``rope_dim`` channels."""
        x_rot, x_pass = op.Split(x, [self.rope_dim, self.dim - self.rope_dim], axis=-1, _outputs=2)
        return op.Concat(rotate(op, x_rot, cos, sin, "deinterleaved"), x_pass, axis=-1)


class GlmMoeDsaAttention(DeepseekV32Attention):
    """DeepSeek-V3.2's attention with GLM's indexer."""

    indexer_class = GlmMoeDsaIndexer


class GlmMoeDsaModel(DeepseekV32Model):
    """DeepSeek-V3.2's model with GLM's attention."""

    attention_class = GlmMoeDsaAttention


class GlmMoeDsaForCausalLM(DeepseekV32ForCausalLM):
    """GLM-MoE-DSA causal LM (HF ``GlmMoeDsaForCausalLM``)."""

    config_class = GlmMoeDsaConfig
    model_class = GlmMoeDsaModel


MODEL_TYPES = {"glm_moe_dsa": GlmMoeDsaForCausalLM}
