"""Qwen3.5 text models: Qwen3-Next with unfused Gated DeltaNet projections.

The linear-attention layers read ``in_proj_qkv`` (``[q; k; v]`` already in conv order),
``in_proj_z``, ``in_proj_b`` and ``in_proj_a`` instead of Qwen3-Next's per-key-head fused
``in_proj_qkvz`` / ``in_proj_ba``; everything else is Qwen3-Next's.

* ``qwen3_5_text``: every MLP is dense (the config has no MoE fields).
* ``qwen3_5_moe_text``: every MLP is MoE with a shared expert; top-k weights are always
  renormalised (the config has no ``norm_topk_prob`` / ``mlp_only_layers`` / ``decoder_sparse_step``).

Their rotary embedding is multimodal RoPE; for text, all three position streams are the
token position, so it reduces to plain (partial) RoPE.
"""

from __future__ import annotations

from dataclasses import dataclass

from mobius.components import Linear
from mobius_text.models.qwen3_next import (
    Qwen3NextConfig,
    Qwen3NextDecoderLayer,
    Qwen3NextForCausalLM,
    Qwen3NextGatedDeltaNet,
    Qwen3NextModel,
)


class _WithDefaults:
    """An HF config seen with defaults for the fields its class deliberately lacks."""

    def __init__(self, hf_config, **defaults) -> None:
        self._hf_config, self._defaults = hf_config, defaults

    def __getattr__(self, name):
        if name in self._defaults:
            return self._defaults[name]
        return getattr(self._hf_config, name)


_NO_MOE = dict(
    num_experts=0,
    num_experts_per_tok=1,
    moe_intermediate_size=0,
    shared_expert_intermediate_size=0,
    norm_topk_prob=False,
    decoder_sparse_step=1,
    mlp_only_layers=[],
)


@dataclass
class Qwen3_5TextConfig(Qwen3NextConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        return super().hf_fields(_WithDefaults(hf_config, **_NO_MOE))


@dataclass
class Qwen3_5MoeTextConfig(Qwen3NextConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        every_layer_moe = dict(
            intermediate_size=0, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[]
        )
        return super().hf_fields(_WithDefaults(hf_config, **every_layer_moe))


class Qwen3_5GatedDeltaNet(Qwen3NextGatedDeltaNet):
    def make_projections(self, config) -> None:
        hidden = config.hidden_size
        self.in_proj_qkv = Linear(hidden, 2 * self.key_dim + self.value_dim)
        self.in_proj_z = Linear(hidden, self.value_dim)
        self.in_proj_b = Linear(hidden, self.v_heads)
        self.in_proj_a = Linear(hidden, self.v_heads)

    def project(self, op, x):
        return (
            self.in_proj_qkv(op, x),
            self.in_proj_z(op, x),
            self.in_proj_b(op, x),
            self.in_proj_a(op, x),
        )


class Qwen3_5DecoderLayer(Qwen3NextDecoderLayer):
    linear_attn_class = Qwen3_5GatedDeltaNet


class Qwen3_5TextModel(Qwen3NextModel):
    layer_class = Qwen3_5DecoderLayer


class Qwen3_5ForCausalLM(Qwen3NextForCausalLM):
    """Qwen3.5 text causal LM (dense MLPs)."""

    config_class = Qwen3_5TextConfig
    model_class = Qwen3_5TextModel


class Qwen3_5MoeForCausalLM(Qwen3NextForCausalLM):
    """Qwen3.5-MoE text causal LM (every MLP routed, with a shared expert)."""

    config_class = Qwen3_5MoeTextConfig
    model_class = Qwen3_5TextModel


MODEL_TYPES = {
    "qwen3_5_text": Qwen3_5ForCausalLM,
    "qwen3_5_moe_text": Qwen3_5MoeForCausalLM,
}
