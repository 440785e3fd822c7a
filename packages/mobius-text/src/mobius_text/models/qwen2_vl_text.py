"""The text decoder of Qwen2-VL and Qwen2.5-VL: Qwen2 with multimodal rotary positions (M-RoPE).

``position_ids`` are ``[3, batch, sequence]`` (temporal, height, width streams); the
rotary channels are split by ``mrope_section`` and channel section ``i`` takes its
angle from stream ``i % 3``. With the three streams equal this is Qwen2's RoPE.

The cos/sin carry no static table, so ``GroupQueryAttention`` never rotates inside its
kernel (the kernel's table is indexed by one position per token): the rotation is an
ONNX ``RotaryEmbedding`` before attention at every ep.

These types are built only as the decoders of their VL families (``qwen2_vl``,
``qwen2_5_vl``), which read 3-D positions: a plain causal LM's ``position_ids`` are
``[batch, sequence]`` and transformers has no causal-LM class for them, so they are
not registered on their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import default_inv_freq
from mobius.errors import ConfigError
from mobius_text.models.qwen import Qwen2ForCausalLM, Qwen2Model, QwenConfig


@dataclass
class Qwen2VLTextConfig(QwenConfig):
    mrope_section: list[int] = field(default_factory=lambda: [16, 24, 24])

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        rope = fields["rope"]
        if rope.rope_type != "default" or rope.partial_rotary_factor != 1.0:
            raise ConfigError(f"{hf_config.model_type}: M-RoPE over {rope.rope_type!r} rope")
        params = dict(getattr(hf_config, "rope_parameters", None) or {})
        section = [int(s) for s in params.get("mrope_section", [16, 24, 24])]
        if sum(section) != fields["head_dim"] // 2:
            raise ConfigError(f"mrope_section {section} does not cover head_dim/2 channels")
        return dict(fields, mrope_section=section)


class MRopeRotary(nn.Module):
    """cos/sin ``[batch, sequence, head_dim/2]`` from ``position_ids [3, batch, sequence]``."""

    def __init__(self, theta: float, head_dim: int, mrope_section: list[int]) -> None:
        super().__init__()
        self.inv_freq = default_inv_freq(theta, head_dim)
        # which position stream each rotary channel reads
        self.stream = np.concatenate(
            [np.full(n, i % 3, dtype=np.int64) for i, n in enumerate(mrope_section)]
        )

    def forward(self, op, position_ids):
        positions = op.Cast(position_ids, to=ir.DataType.FLOAT)  # [3, batch, sequence]
        per_channel = op.Gather(positions, op.Constant(value=ir.tensor(self.stream)), axis=0)
        per_channel = op.Transpose(per_channel, perm=[1, 2, 0])  # [batch, sequence, head_dim/2]
        freqs = op.Mul(per_channel, op.Constant(value=ir.tensor(self.inv_freq)))
        return op.Cos(freqs), op.Sin(freqs)


class Qwen2VLTextModel(Qwen2Model):
    def __init__(self, config: Qwen2VLTextConfig) -> None:
        super().__init__(config)
        self.rotary_emb = MRopeRotary(config.rope.theta, config.head_dim, config.mrope_section)


class Qwen2VLTextForCausalLM(Qwen2ForCausalLM):
    """Qwen2 over 3-D positions; built by the VL families (see the module docstring)."""

    config_class = Qwen2VLTextConfig
    model_class = Qwen2VLTextModel


MODEL_TYPES: dict = {}  # qwen2_vl_text, qwen2_5_vl_text: parts of qwen2_vl, qwen2_5_vl only
