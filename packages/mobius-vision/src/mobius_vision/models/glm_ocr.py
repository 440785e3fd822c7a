"""GLM-OCR (``glm_ocr``): GLM-4.1V's contract and layout, with a leaner tower and a decoder
without q/k/v biases.

Inputs, positions, checkpoint names and the processor are GLM-4.1V's (:mod:`.glm4v`). The
tower (``glm_ocr_vision``) differs from GLM-4.1V's:

- no learnt position table and no norm after the patch Conv3d: the 2-D rotary is the
  only position signal;
- each head's query and key go through an RMSNorm (``q_norm``/``k_norm``) before the
  rotary; ``attention_bias`` puts biases on ``qkv``, ``proj`` and the block MLP;
- the block MLP is ``intermediate_size`` wide (GLM-4.1V's is ``out_hidden_size``), and
  the merger's gated MLP ``out_hidden_size * in_channels``.

The decoder is mobius-text's ``glm_ocr_text`` (GLM-4.1V's without q/k/v biases).
"""

from __future__ import annotations

from dataclasses import dataclass

from onnxscript import nn

from mobius.components import GatedMLP, Linear, RMSNorm, apply_rotary
from mobius_text.models.glm_ocr_text import GlmOcrTextConfig, GlmOcrTextForCausalLM
from mobius_vision.models.glm4v import (
    Glm4vConfig,
    Glm4vForConditionalGeneration,
    Glm4vPatchMerger,
    Glm4vVisionBlock,
    Glm4vVisionConfig,
    Glm4vVisionTower,
)
from mobius_vision.models.qwen2_vl import VisionAttention


class GlmOcrVisionAttention(VisionAttention):
    """Qwen2-VL's attention with per-head RMS norms on queries and keys before the rotary."""

    def __init__(self, dim: int, num_heads: int, bias: bool, eps: float) -> None:
        super().__init__(dim, num_heads)
        self.qkv = Linear(dim, 3 * dim, bias=bias)
        self.proj = Linear(dim, dim, bias=bias)
        self.q_norm, self.k_norm = RMSNorm(self.head_dim, eps), RMSNorm(self.head_dim, eps)

    def forward(self, op, x, cos, sin, mask):
        qkv = op.Reshape(
            self.qkv(op, x), op.Constant(value_ints=[1, -1, 3, self.num_heads, self.head_dim])
        )
        qkv = op.Transpose(qkv, perm=[2, 0, 3, 1, 4])  # [3, 1, heads, patches, head_dim]
        q, k, v = (op.Squeeze(t, [0]) for t in op.Split(qkv, num_outputs=3, axis=0, _outputs=3))
        q = apply_rotary(op, self.q_norm(op, q), cos, sin, self.head_dim)
        k = apply_rotary(op, self.k_norm(op, k), cos, sin, self.head_dim)
        y = op.Attention(q, k, v, mask, scale=self.head_dim**-0.5)  # [1, heads, patches, hd]
        y = op.Transpose(y, perm=[0, 2, 1, 3])  # [1, patches, heads, head_dim]
        return self.proj(op, op.Reshape(y, op.Constant(value_ints=[-1, self.dim])))


class GlmOcrVisionBlock(Glm4vVisionBlock):
    def __init__(self, config: Glm4vVisionConfig) -> None:
        nn.Module.__init__(self)
        d, eps, bias = config.embed_dim, config.rms_norm_eps, config.attention_bias
        self.norm1, self.norm2 = RMSNorm(d, eps), RMSNorm(d, eps)
        self.attn = GlmOcrVisionAttention(d, config.num_heads, bias, eps)
        self.mlp = GatedMLP(d, config.intermediate_size, config.hidden_act, bias)


class _Unchanged(nn.Module):
    """A GLM-4.1V tower step GLM-OCR has not: returns its first input."""

    def forward(self, op, x, *_):
        return x


class GlmOcrVisionTower(Glm4vVisionTower):
    """HF ``GlmOcrVisionModel``: see the module docstring."""

    block_class = GlmOcrVisionBlock

    def __init__(self, config: Glm4vVisionConfig) -> None:
        super().__init__(config)
        # no learnt position table, no norm after the patch Conv3d
        self.embeddings = _Unchanged()
        self.post_conv_layernorm = _Unchanged()

    def make_merger(self, config: Glm4vVisionConfig) -> Glm4vPatchMerger:
        width = config.hidden_size * config.in_channels
        return Glm4vPatchMerger(config.hidden_size, width, config.hidden_act)


@dataclass
class GlmOcrConfig(Glm4vConfig):
    text_config_class = GlmOcrTextConfig


class GlmOcrForConditionalGeneration(Glm4vForConditionalGeneration):
    """GLM-OCR's tower (``model.visual``) and decoder; GLM-4.1V's contract."""

    config_class = GlmOcrConfig
    tower_class = GlmOcrVisionTower
    decoder_class = GlmOcrTextForCausalLM


MODEL_TYPES = {"glm_ocr": GlmOcrForConditionalGeneration}
