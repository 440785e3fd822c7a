"""The text decoder of DeepSeek-OCR 2 (``deepseek_ocr2_text``): DeepSeek-V2's experts under
plain multi-head attention.

The layers are DeepSeek-V2's (:mod:`.deepseek_v2`): a gated MLP where ``mlp_layer_types``
says "dense", routed experts (softmax, greedy or group-limited top-k, never renormalised)
plus shared experts where it says "sparse". The attention is Llama's instead of
multi-head latent attention: ``q/k/v/o_proj`` with ``head_dim = hidden / heads``, the
rotate-half RoPE, and a plain key/value cache.

Built only as the decoder of ``deepseek_ocr2`` (and of ``unlimited_ocr``'s checkpoints):
transformers has no causal LM class for it, so it is not registered on its own and is
verified by the VL parity case of ``deepseek_ocr2``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mobius_text.models.deepseek_v2 import DeepseekMoEConfig, DeepseekV2Model
from mobius_text.models.llama import LlamaForCausalLM, LlamaModel


@dataclass
class DeepseekOcr2TextConfig(DeepseekMoEConfig):
    @classmethod
    def hf_fields(cls, hf_config):
        # the config class drops norm_topk_prob: its router never renormalises
        return {**super().hf_fields(hf_config), "norm_topk_prob": False}


class DeepseekOcr2TextModel(DeepseekV2Model):
    """DeepSeek-V2's dense and MoE layers around Llama's attention."""

    def make_attention(self, config, layer_idx):
        return LlamaModel.make_attention(self, config, layer_idx)


class DeepseekOcr2TextForCausalLM(LlamaForCausalLM):
    """The causal LM of ``deepseek_ocr2`` (see the module docstring); a plain key/value cache."""

    config_class = DeepseekOcr2TextConfig
    model_class = DeepseekOcr2TextModel


MODEL_TYPES: dict = {}  # deepseek_ocr2_text: a part of deepseek_ocr2 only
