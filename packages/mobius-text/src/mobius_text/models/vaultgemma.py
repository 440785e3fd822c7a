"""VaultGemma: Gemma 2 without the post-attention and post-feedforward norms."""

from __future__ import annotations

from onnxscript import nn

from mobius.components import GatedMLP
from mobius_text.models.gemma import GemmaRMSNorm
from mobius_text.models.gemma2 import Gemma2Config, Gemma2ForCausalLM, Gemma2Model


class VaultGemmaDecoderLayer(nn.Module):
    """``x + attn(norm(x))`` then ``x + mlp(norm(x))``, the second norm named as Gemma 2 names it."""

    def __init__(self, self_attn, mlp, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.self_attn = self_attn
        self.mlp = mlp
        self.input_layernorm = GemmaRMSNorm(hidden_size, eps)
        self.pre_feedforward_layernorm = GemmaRMSNorm(hidden_size, eps)

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        h, present = self.self_attn(
            op, self.input_layernorm(op, x), position_embeddings, bias, past_key, past_value
        )
        x = op.Add(x, h)
        x = op.Add(x, self.mlp(op, self.pre_feedforward_layernorm(op, x)))
        return x, present


class VaultGemmaModel(Gemma2Model):
    def make_layer(self, config: Gemma2Config, layer_idx: int) -> VaultGemmaDecoderLayer:
        return VaultGemmaDecoderLayer(
            self.make_attention(config, layer_idx),
            GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act),
            config.hidden_size,
            config.rms_norm_eps,
        )


class VaultGemmaForCausalLM(Gemma2ForCausalLM):
    """VaultGemma causal LM: Gemma 2's soft-capping and sliding layers, two norms per layer."""

    model_class = VaultGemmaModel


MODEL_TYPES = {"vaultgemma": VaultGemmaForCausalLM}
