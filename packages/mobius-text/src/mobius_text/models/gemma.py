"""Gemma: Llama with offset RMS norms ``x * (1 + w)``, scaled embeddings and a GeGLU MLP.

Gemma 2, VaultGemma and Gemma 3 build on the pieces here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from mobius.components import DecoderLayer, Embedding, GatedMLP, RMSNorm
from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM, LlamaModel


@dataclass
class GemmaConfig(LlamaConfig):
    """Gemma reads the normalised fields; its MLP never has biases."""

    @classmethod
    def hf_fields(cls, hf_config):
        if getattr(hf_config, "use_bidirectional_attention", False):
            raise ValueError(
                f"{hf_config.model_type} with use_bidirectional_attention is an encoder "
                "(embedding model), not a causal LM"
            )
        return {**super().hf_fields(hf_config), "mlp_bias": False}


class GemmaRMSNorm(RMSNorm):
    """``x / rms(x) * (1 + weight)``: checkpoints store the scale's offset from one.

    Like PyTorch, the offset scale and the normalisation are computed in float32
    whatever the model dtype, then cast back.
    """

    def forward(self, op, x: ir.Value) -> ir.Value:
        if x.dtype == ir.DataType.FLOAT:
            scale = op.Add(self.weight, 1.0)
            return op.RMSNormalization(x, scale, axis=-1, epsilon=self.eps, stash_type=1)
        scale = op.Add(op.Cast(self.weight, to=ir.DataType.FLOAT), 1.0)
        x32 = op.Cast(x, to=ir.DataType.FLOAT)
        y = op.RMSNormalization(x32, scale, axis=-1, epsilon=self.eps, stash_type=1)
        return op.CastLike(y, x)


class ScaledEmbedding(Embedding):
    """Token lookup times ``sqrt(hidden)``, the factor rounded to the model dtype as PyTorch does."""

    def forward(self, op, ids: ir.Value) -> ir.Value:
        x = super().forward(op, ids)  # [batch, seq, hidden]
        factor = np.array(np.float32(self.weight.shape[1] ** 0.5)).astype(self.weight.dtype.numpy())
        return op.Mul(x, op.Constant(value=ir.tensor(factor)))


class GemmaModel(LlamaModel):
    """Llama's layout with Gemma norms and embeddings; rotary tables may differ per layer type."""

    def __init__(self, config: GemmaConfig) -> None:
        super().__init__(config)
        self.embed_tokens = ScaledEmbedding(config.vocab_size, config.hidden_size)
        self.norm = GemmaRMSNorm(config.hidden_size, config.rms_norm_eps)

    def make_layer(self, config: GemmaConfig, layer_idx: int) -> DecoderLayer:
        return DecoderLayer(
            self_attn=self.make_attention(config, layer_idx),
            mlp=GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act),
            input_layernorm=GemmaRMSNorm(config.hidden_size, config.rms_norm_eps),
            post_attention_layernorm=GemmaRMSNorm(config.hidden_size, config.rms_norm_eps),
        )


class GemmaForCausalLM(LlamaForCausalLM):
    """Gemma causal LM (tied head by default)."""

    config_class = GemmaConfig
    model_class = GemmaModel


MODEL_TYPES = {"gemma": GemmaForCausalLM}
