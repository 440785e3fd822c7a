"""EXAONE 4.5 (``exaone4_5``): Qwen2.5-VL's tower with grouped-query attention, over EXAONE 4.

What differs from Qwen2.5-VL:

- the tower's attention has ``num_key_value_heads`` key/value heads: ``qkv`` writes the
  queries' ``num_heads * head_dim`` channels, then the keys' and values'
  ``num_key_value_heads * head_dim`` each (``head_dim = hidden_size / num_heads``);
- the text decoder is whatever mobius-text registers for ``text_config.model_type``
  (``exaone4`` on the hub), with plain 1-D positions: no M-RoPE, no rope deltas.

The vision inputs are Qwen2-VL's (``pixel_values`` flattened patches, ``image_grid_thw``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear, apply_rotary
from mobius.errors import ConfigError
from mobius_vision.config import VisionLanguageConfig, composed_config
from mobius_vision.models._vl import text_decoder
from mobius_vision.models.qwen2_5_vl import (
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLVisionBlock,
    Qwen2_5_VLVisionConfig,
    Qwen2_5_VLVisionTower,
)
from mobius_vision.models.qwen2_vl import VisionAttention


@dataclass
class Exaone4_5VisionConfig(Qwen2_5_VLVisionConfig):
    num_key_value_heads: int = 8

    @classmethod
    def from_hf(cls, hf: Any) -> Exaone4_5VisionConfig:
        fields = vars(Qwen2_5_VLVisionConfig.from_hf(hf))
        heads, kv_heads = fields["num_heads"], hf.num_key_value_heads
        if not isinstance(kv_heads, int) or kv_heads < 1 or heads % kv_heads:
            raise ConfigError(
                f"{hf.model_type}: num_key_value_heads {kv_heads!r} does not divide "
                f"num_heads {heads}"
            )
        return cls(**fields, num_key_value_heads=kv_heads)


class GroupedVisionAttention(VisionAttention):
    """The tower's attention with fewer key/value heads than query heads."""

    def __init__(self, dim: int, num_heads: int, num_kv_heads: int) -> None:
        super().__init__(dim, num_heads)
        self.kv_heads = num_kv_heads
        self.qkv = Linear(dim, dim + 2 * num_kv_heads * self.head_dim, bias=True)

    def forward(self, op, x, cos, sin, mask):
        kv_width = self.kv_heads * self.head_dim
        q, k, v = op.Split(self.qkv(op, x), [self.dim, kv_width, kv_width], axis=-1, _outputs=3)

        def heads(t, count):  # [patches, count * head_dim] -> [1, count, patches, head_dim]
            t = op.Reshape(t, op.Constant(value_ints=[1, -1, count, self.head_dim]))
            return op.Transpose(t, perm=[0, 2, 1, 3])

        q = apply_rotary(op, heads(q, self.num_heads), cos, sin, self.head_dim)
        k = apply_rotary(op, heads(k, self.kv_heads), cos, sin, self.head_dim)
        y = op.Attention(q, k, heads(v, self.kv_heads), mask, scale=self.head_dim**-0.5)
        y = op.Transpose(y, perm=[0, 2, 1, 3])  # [1, patches, heads, head_dim]
        return self.proj(op, op.Reshape(y, op.Constant(value_ints=[-1, self.dim])))


class Exaone4_5VisionBlock(Qwen2_5_VLVisionBlock):
    def __init__(self, config: Exaone4_5VisionConfig) -> None:
        super().__init__(config)
        self.attn = GroupedVisionAttention(
            config.embed_dim, config.num_heads, config.num_key_value_heads
        )


class Exaone4_5VisionTower(Qwen2_5_VLVisionTower):
    """Qwen2.5-VL's tower with grouped-query blocks."""

    block_class = Exaone4_5VisionBlock


@dataclass
class Exaone4_5Config(VisionLanguageConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        # the tower is built here: exaone4_5_vision is no standalone type of the registry
        return dict(
            model_type=hf_config.model_type,
            vision=Exaone4_5VisionConfig.from_hf(hf_config.vision_config),
            text=composed_config(cls.text_hf_config(hf_config)),
            image_token_id=int(hf_config.image_token_id),
        )


class Exaone4_5ForConditionalGeneration(Qwen2_5_VLForConditionalGeneration):
    """The grouped-query Qwen2.5-VL tower (``visual``) and the registered text decoder."""

    config_class = Exaone4_5Config
    tower_class = Exaone4_5VisionTower

    def __init__(self, config: Exaone4_5Config) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.vision_tower = self.tower_class(config.vision)
        self.language_model = text_decoder(config.text)

    def position_ids_shape(self) -> list:
        return ["batch", "sequence"]


MODEL_TYPES = {"exaone4_5": Exaone4_5ForConditionalGeneration}
