"""The text decoder of HunYuan-VL (HunyuanOCR): Hunyuan V1 Dense over multi-axis rotary positions.

``position_ids`` are ``[axes, batch, sequence]``, one stream per entry of
``mrope_section`` (HunyuanOCR's "xdrope": 4 axes, position, width, height, image
index). Unlike Qwen2-VL's M-RoPE, the sections split the *full* rotary width (the
cos/sin table written twice, ``[f, f]``) into runs of ``2 * section`` channels, run
``i`` reading stream ``i``: the two halves a rotate-half pairs may read different
streams. With all streams equal (text, decode steps) it is Hunyuan's plain RoPE.
The NTK-alpha base stretch of Hunyuan V1 Dense applies as there.

Built only as the decoder of ``hunyuan_vl`` (transformers has no causal-LM class over
its multi-axis positions), so it is not registered on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import default_inv_freq, merge_heads
from mobius.errors import ConfigError
from mobius_text.models.hunyuan_v1_dense import (
    HunYuanDenseV1Config,
    HunYuanDenseV1ForCausalLM,
    HunYuanDenseV1Model,
    PostRopeQKNormAttention,
)


@dataclass
class HunYuanVLTextConfig(HunYuanDenseV1Config):
    mrope_section: list[int] = field(default_factory=lambda: [16, 16, 16, 16])

    @classmethod
    def hf_fields(cls, hf_config):
        fields = super().hf_fields(hf_config)
        params = dict(getattr(hf_config, "rope_parameters", None) or {})
        section = params.get("mrope_section")
        if not isinstance(section, (list, tuple)) or len(section) < 3:
            raise ConfigError(f"{hf_config.model_type}: mrope_section {section!r} is not 3+ ints")
        section = [int(s) for s in section]
        if min(section) < 0 or sum(section) != fields["head_dim"] // 2:
            raise ConfigError(f"mrope_section {section} does not cover head_dim/2 channels")
        if fields["rope"].partial_rotary_factor != 1.0:
            raise ConfigError(f"{hf_config.model_type}: multi-axis rope over a partial rotary")
        return dict(fields, mrope_section=section)


class MultiAxisRotary(nn.Module):
    """cos/sin ``[batch, sequence, head_dim]`` from ``position_ids [axes, batch, sequence]``.

    Channel ``c`` rotates by frequency ``c mod head_dim/2`` at the position of the
    stream whose ``2 * section`` run holds ``c``.
    """

    def __init__(self, inv_freq: np.ndarray, mrope_section: list[int]) -> None:
        super().__init__()
        self.inv_freq = np.concatenate([inv_freq, inv_freq]).astype(np.float32)
        self.stream = np.concatenate(
            [np.full(2 * n, i, dtype=np.int64) for i, n in enumerate(mrope_section)]
        )

    def forward(self, op, position_ids):
        positions = op.Cast(position_ids, to=ir.DataType.FLOAT)  # [axes, batch, sequence]
        per_channel = op.Gather(positions, op.Constant(value=ir.tensor(self.stream)), axis=0)
        per_channel = op.Transpose(per_channel, perm=[1, 2, 0])  # [batch, sequence, head_dim]
        angles = op.Mul(per_channel, op.Constant(value=ir.tensor(self.inv_freq)))
        return op.Cos(angles), op.Sin(angles)


def rotate_full_width(op, x, cos, sin):
    """``x * cos + rotate_half(x) * sin`` for ``x [batch, heads, seq, head_dim]`` and a
    full-width ``cos``/``sin`` ``[batch, seq, head_dim]`` (its halves may differ)."""
    first, second = op.Split(x, num_outputs=2, axis=-1, _outputs=2)
    rotated = op.Concat(op.Neg(second), first, axis=-1)
    # float32 tables in the activations' type, as transformers' rotary embedding returns them
    cos, sin = (op.CastLike(op.Unsqueeze(table, [1]), x) for table in (cos, sin))
    # Sum, not Add: core's skip-norm fusion would take an Add before the per-head RMSNorm
    # and fuse it into SkipSimplifiedLayerNormalization, which accepts no 4-D input.
    return op.Sum(op.Mul(x, cos), op.Mul(rotated, sin))


class MultiAxisQKNormAttention(PostRopeQKNormAttention):
    """Hunyuan's post-rotary q/k norms, rotating by a full-width multi-axis table."""

    def forward(self, op, x, position_embeddings, bias, past_key, past_value):
        q, k, v = self.project_qkv(op, x)  # [batch, heads, seq, head_dim]
        cos, sin = position_embeddings
        q = self.query_layernorm(op, rotate_full_width(op, q, cos, sin))
        k = self.key_layernorm(op, rotate_full_width(op, k, cos, sin))
        y, present_key, present_value = self.attend(op, q, k, v, bias, past_key, past_value)
        return self.o_proj(op, merge_heads(op, y)), (present_key, present_value)


class HunYuanVLTextModel(HunYuanDenseV1Model):
    def __init__(self, config: HunYuanVLTextConfig) -> None:
        super().__init__(config)
        dim, base = config.head_dim, config.rope.theta
        if config.ntk_alpha is not None:
            base = base * config.ntk_alpha ** (dim / (dim - 2))
        self.rotary_emb = MultiAxisRotary(default_inv_freq(base, dim), config.mrope_section)

    def make_attention(self, config, layer_idx):
        return MultiAxisQKNormAttention(
            config.hidden_size,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            bias=config.attention_bias,
            out_bias=config.attention_bias,
            eps=config.rms_norm_eps,
        )


class HunYuanVLTextForCausalLM(HunYuanDenseV1ForCausalLM):
    """Hunyuan V1 Dense over multi-axis positions; built by ``hunyuan_vl`` (module docstring)."""

    config_class = HunYuanVLTextConfig
    model_class = HunYuanVLTextModel

    def position_axes(self) -> int:
        """How many position streams ``position_ids`` holds."""
        return len(self.config.mrope_section)


MODEL_TYPES: dict = {}  # hunyuan_vl_text: part of hunyuan_vl only
