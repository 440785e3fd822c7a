"""Molmo2's vision tower (``molmo2_vision``): a ViT over patches the processor already cut.

``pixel_values`` is ``[crops, patches, patch * patch * channels]`` (each patch's pixels
row by row, channels last, as Molmo2's image processor lays them): ``patch_embedding`` is
a Linear, then the learnt ``positional_embedding`` (one row per patch of a crop) is added.
Pre-norm layers: LayerNorms, multi-head attention with biases, a two-layer MLP. The
family reads several layers' outputs (:meth:`Molmo2VisionTower.hidden_states`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import MLP, LayerNorm, Linear
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig


def positive_count(value, what: str) -> int:
    """``value`` where it is an int of at least 1, else a ConfigError naming ``what``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{what} {value!r} is not a positive count")
    return value


@dataclass
class Molmo2VisionConfig(VisionConfig):
    hidden_size: int = 1152
    intermediate_size: int = 4304
    num_hidden_layers: int = 25
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    head_dim: int = 72
    patch_size: int = 14
    num_position_embeddings: int = 729
    hidden_act: str = "gelu_pytorch_tanh"
    layer_norm_eps: float = 1e-6
    attention_bias: bool = True

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = dict(
            super().hf_fields(hf_config),
            hidden_size=positive_count(hf_config.hidden_size, "molmo2_vision: hidden_size"),
            intermediate_size=positive_count(
                hf_config.intermediate_size, "molmo2_vision: intermediate_size"
            ),
            num_hidden_layers=positive_count(
                hf_config.num_hidden_layers, "molmo2_vision: num_hidden_layers"
            ),
            num_attention_heads=positive_count(
                hf_config.num_attention_heads, "molmo2_vision: num_attention_heads"
            ),
            num_key_value_heads=positive_count(
                hf_config.num_key_value_heads, "molmo2_vision: num_key_value_heads"
            ),
            head_dim=positive_count(hf_config.head_dim, "molmo2_vision: head_dim"),
            patch_size=positive_count(hf_config.patch_size, "molmo2_vision: patch_size"),
            num_position_embeddings=positive_count(
                hf_config.num_position_embeddings, "molmo2_vision: num_position_embeddings"
            ),
            hidden_act=hf_config.hidden_act,
            layer_norm_eps=float(hf_config.layer_norm_eps),
            attention_bias=bool(hf_config.attention_bias),
        )
        height, width = fields["image_size"]
        patches = (height // fields["patch_size"]) * (width // fields["patch_size"])
        if patches != fields["num_position_embeddings"]:  # transformers adds them row for row
            raise ConfigError(
                f"molmo2_vision: {patches} patches per crop but "
                f"{fields['num_position_embeddings']} position embeddings"
            )
        return fields


class Molmo2Attention(nn.Module):
    """Attention of ``queries`` over ``keys`` (the same tokens in the tower, the pooled patches
    in the adapter), ``[batch, tokens, width]`` in and out; ``mask`` is an additive bias."""

    def __init__(
        self, width: int, out_width: int, heads: int, kv_heads: int, head_dim: int, bias: bool
    ) -> None:
        super().__init__()
        self.q_proj = Linear(width, heads * head_dim, bias)
        self.k_proj = Linear(width, kv_heads * head_dim, bias)
        self.v_proj = Linear(width, kv_heads * head_dim, bias)
        self.o_proj = Linear(heads * head_dim, out_width, bias)
        self.heads, self.kv_heads, self.scale = heads, kv_heads, head_dim**-0.5

    def forward(self, op, queries, keys, mask=None):
        y = op.Attention(
            self.q_proj(op, queries),
            self.k_proj(op, keys),
            self.v_proj(op, keys),
            mask,
            q_num_heads=self.heads,
            kv_num_heads=self.kv_heads,
            scale=self.scale,
        )
        return self.o_proj(op, y)


class Molmo2VisionLayer(nn.Module):
    def __init__(self, config: Molmo2VisionConfig) -> None:
        super().__init__()
        d, eps = config.hidden_size, config.layer_norm_eps
        self.layer_norm1, self.layer_norm2 = LayerNorm(d, eps), LayerNorm(d, eps)
        self.self_attn = Molmo2Attention(
            d,
            d,
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            config.attention_bias,
        )
        self.mlp = MLP(d, config.intermediate_size, config.hidden_act, True)

    def forward(self, op, x):
        h = self.layer_norm1(op, x)
        x = op.Add(x, self.self_attn(op, h, h))
        return op.Add(x, self.mlp(op, self.layer_norm2(op, x)))


class Molmo2VisionTower(nn.Module):
    """HF ``Molmo2VisionModel``: see the module docstring."""

    def __init__(self, config: Molmo2VisionConfig, num_layers: int | None = None) -> None:
        super().__init__()
        pixels = config.patch_size * config.patch_size * config.num_channels
        self.patch_embedding = Linear(pixels, config.hidden_size, True)
        self.positional_embedding = nn.Parameter(
            [config.num_position_embeddings, config.hidden_size]
        )
        count = config.num_hidden_layers if num_layers is None else num_layers
        self.layers = nn.ModuleList([Molmo2VisionLayer(config) for _ in range(count)])

    def hidden_states(self, op, pixel_values, num_layers: int | None = None) -> list:
        """The embeddings and each built layer's output (``hidden_states`` of transformers)."""
        x = op.Add(self.patch_embedding(op, pixel_values), self.positional_embedding)
        states = [x]
        for layer in self.layers:
            x = layer(op, x)
            states.append(x)
        return states
