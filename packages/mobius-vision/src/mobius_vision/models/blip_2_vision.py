"""BLIP-2's (and InstructBLIP's) vision tower: BLIP's ViT with one fused ``qkv`` projection.

A class token and learned positions ``[1, positions, hidden]``, pre-norm layers whose
attention projects queries, keys and values with one ``qkv`` linear (its bias, where
``qkv_bias`` is set, is the checkpoint's ``[3 * hidden]`` vector: the key part is
zeros in transformers' own model), then ``post_layernorm`` over every token. The
Q-Former reads that normed ``last_hidden_state``; the pooled output is the normed
class token normed once more, as transformers computes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, bidirectional_attention
from mobius_vision.models._common import VisionTowerModel
from mobius_vision.models.clip_vision import CLIPMLP, CLIPVisionConfig
from mobius_vision.models.vit import PatchConv


@dataclass
class Blip2VisionConfig(CLIPVisionConfig):
    """CLIP's tower sizes (no projection), BLIP-2's defaults, and ``qkv_bias``."""

    hidden_size: int = 1408
    intermediate_size: int = 6144
    num_hidden_layers: int = 39
    num_attention_heads: int = 16
    patch_size: int = 14
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-6
    qkv_bias: bool = True

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        return dict(super().hf_fields(hf_config), qkv_bias=bool(hf_config.qkv_bias))


class Blip2VisionEmbeddings(nn.Module):
    """``[class, patches] + position_embedding``; both learned as ``[1, n, hidden]``."""

    def __init__(self, config: Blip2VisionConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.class_embedding = nn.Parameter([1, 1, d])
        self.patch_embedding = PatchConv(config.num_channels, d, config.patch_size)
        self.position_embedding = nn.Parameter([1, config.num_positions, d])

    def forward(self, op, pixel_values):
        patches = self.patch_embedding(op, pixel_values)  # [batch, patches, hidden]
        batch = op.Shape(pixel_values, start=0, end=1)
        cls = op.Expand(self.class_embedding, op.Concat(batch, [1, 1], axis=0))
        return op.Add(op.Concat(cls, patches, axis=1), self.position_embedding)


class Blip2Attention(nn.Module):
    """Self-attention over every token: one ``qkv`` linear, then ``projection``."""

    def __init__(self, hidden: int, heads: int, qkv_bias: bool) -> None:
        super().__init__()
        self.qkv = Linear(hidden, 3 * hidden, bias=qkv_bias)
        self.projection = Linear(hidden, hidden, bias=True)
        self.num_heads, self.scale = heads, (hidden // heads) ** -0.5

    def forward(self, op, x):
        q, k, v = op.Split(self.qkv(op, x), axis=-1, num_outputs=3, _outputs=3)
        return self.projection(
            op, bidirectional_attention(op, q, k, v, None, self.num_heads, self.scale)
        )


class Blip2EncoderLayer(nn.Module):
    """Pre-norm: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``."""

    def __init__(self, config: Blip2VisionConfig) -> None:
        super().__init__()
        d, eps = config.hidden_size, config.layer_norm_eps
        self.layer_norm1 = LayerNorm(d, eps)
        self.self_attn = Blip2Attention(d, config.num_attention_heads, config.qkv_bias)
        self.layer_norm2 = LayerNorm(d, eps)
        self.mlp = CLIPMLP(d, config.intermediate_size, config.hidden_act)

    def forward(self, op, x):
        x = op.Add(x, self.self_attn(op, self.layer_norm1(op, x)))
        return op.Add(x, self.mlp(op, self.layer_norm2(op, x)))


class Blip2Encoder(nn.Module):
    def __init__(self, config: Blip2VisionConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [Blip2EncoderLayer(config) for _ in range(config.num_hidden_layers)]
        )

    def forward(self, op, x):
        for layer in self.layers:
            x = layer(op, x)
        return x


class Blip2VisionTransformer(nn.Module):
    """The tower (HF ``Blip2VisionModel``): embeddings, encoder, ``post_layernorm``."""

    def __init__(self, config: Blip2VisionConfig) -> None:
        super().__init__()
        self.embeddings = Blip2VisionEmbeddings(config)
        self.encoder = Blip2Encoder(config)
        self.post_layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, pixel_values):
        """``(last_hidden_state [batch, positions, hidden], pooler_output [batch, hidden])``."""
        x = self.encoder(op, self.embeddings(op, pixel_values))
        last = self.post_layernorm(op, x)
        cls = op.Gather(last, op.Constant(value_int=0), axis=1)
        return last, self.post_layernorm(op, cls)


class Blip2VisionModel(VisionTowerModel):
    """``vision_model``: ``last_hidden_state`` and ``pooler_output``."""

    config_class = Blip2VisionConfig
    tower_class = Blip2VisionTransformer

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        return {
            "last_hidden_state": ["batch", c.num_positions, c.hidden_size],
            "pooler_output": ["batch", c.hidden_size],
        }

    def forward(self, op, pixel_values):
        hidden, pooled = self.vision_model(op, pixel_values)
        return {"last_hidden_state": hidden, "pooler_output": pooled}


MODEL_TYPES = {
    "blip_2_vision_model": Blip2VisionModel,
    "instructblip_vision_model": Blip2VisionModel,  # the same tower
}
