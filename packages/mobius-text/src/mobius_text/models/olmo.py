"""OLMo: Llama with weightless LayerNorms and optional clipping of q, k and v.

Every norm is a LayerNorm with neither weight nor bias (epsilon fixed at 1e-5),
so the checkpoint has no norm tensors. With ``clip_qkv`` set, the query, key and
value projections are clamped to ``[-clip_qkv, clip_qkv]`` before RoPE.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Attention, DecoderLayer, GatedMLP, rotary_dim
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class OlmoConfig(LlamaConfig):
    clip_qkv: float | None = None

    @classmethod
    def hf_fields(cls, hf_config):
        return {
            **super().hf_fields(hf_config),
            "mlp_bias": False,  # OLMo MLPs have no biases
            "clip_qkv": getattr(hf_config, "clip_qkv", None),
        }


class WeightlessLayerNorm(nn.Module):
    """LayerNorm over the last axis with no learnable weight or bias."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, op, x: ir.Value) -> ir.Value:
        ones = op.CastLike(op.Constant(value=ir.tensor(np.ones(self.dim, np.float32))), x)
        return op.LayerNormalization(x, ones, axis=-1, epsilon=self.eps, stash_type=1)


class ClippedQKVAttention(Attention):
    """Attention whose q, k and v projections are clamped to ``[-clip, clip]``."""

    def __init__(self, *args, clip: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.clip = clip

    def project_qkv(self, op, x):
        def clamp(t):
            return op.Clip(t, op.CastLike(-self.clip, t), op.CastLike(self.clip, t))

        q = self.split_heads(op, clamp(self.q_proj(op, x)))
        k = self.split_heads(op, clamp(self.k_proj(op, x)))
        v = self.split_heads(op, clamp(self.v_proj(op, x)))
        return q, k, v


class OlmoModel(LlamaModel):
    def __init__(self, config: OlmoConfig) -> None:
        super().__init__(config)
        self.norm = WeightlessLayerNorm(config.hidden_size)

    def make_attention(self, config, layer_idx):
        if config.clip_qkv is None:
            return super().make_attention(config, layer_idx)
        return ClippedQKVAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            rotary_dim=rotary_dim(config.rope, config.head_dim),
            clip=float(config.clip_qkv),
        )

    def make_layer(self, config, layer_idx):
        return DecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act),
            input_layernorm=WeightlessLayerNorm(config.hidden_size),
            post_attention_layernorm=WeightlessLayerNorm(config.hidden_size),
        )


class OlmoForCausalLM(LlamaForCausalLM):
    """OLMo's causal LM: the Llama head over :class:`OlmoModel`."""

    config_class = OlmoConfig
    model_class = OlmoModel


MODEL_TYPES = {"olmo": OlmoForCausalLM}
