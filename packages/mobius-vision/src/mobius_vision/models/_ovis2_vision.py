"""Ovis2's vision tower: AIMv2-style layers over SigLIP's patches, and the visual vocabulary head.

``transformer``: the patch convolution, an RMS norm, then the learned positions; pre-norm
layers with RMS norms (``rms_norm1``/``rms_norm2``), plain multi-head ``attention``
and a SwiGLU ``ffn``; a final ``rms_norm``. Then each ``hidden_stride x hidden_stride``
block of patches is concatenated (row-major within the block), ``head_linear`` maps it
to the visual vocabulary less its indicator tokens, and ``head_norm`` (a LayerNorm)
precedes the family's softmax (:mod:`mobius_vision.models.ovis2`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import GatedMLP, LayerNorm, Linear, RMSNorm, bidirectional_attention
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig
from mobius_vision.models.clip_vision import PositionTable
from mobius_vision.models.vit import PatchConv


@dataclass
class Ovis2VisionConfig(VisionConfig):
    hidden_size: int = 1024
    intermediate_size: int = 2816
    num_hidden_layers: int = 24
    num_attention_heads: int = 8
    patch_size: int = 14
    rms_norm_eps: float = 1e-5
    qkv_bias: bool = False
    mlp_bias: bool = False
    hidden_act: str = "silu"
    vocab_size: int = 16384
    hidden_stride: int = 1
    num_visual_indicator_tokens: int = 5
    tokenize_function: str = "softmax"

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        patch, stride = hf_config.patch_size, hf_config.hidden_stride
        height, width = fields["image_size"]
        if not isinstance(patch, int) or height != width or height % patch:
            raise ConfigError(
                f"ovis2_vision: patch_size {patch!r} must be one int dividing the square "
                f"image_size {hf_config.image_size!r}"
            )
        if not isinstance(stride, int) or stride < 1 or (height // patch) % stride:
            # transformers pads the wrong axes there and fails: refuse rather than guess
            raise ConfigError(
                f"ovis2_vision: hidden_stride {stride!r} must divide the {height // patch} "
                "patches per side"
            )
        function = hf_config.tokenize_function
        if function != "softmax":  # the others sample (gumbel) or pick one-hot (st_argmax)
            raise ConfigError(f"ovis2_vision: tokenize_function {function!r} is not softmax")
        indicators = int(hf_config.num_visual_indicator_tokens)
        if not 0 <= indicators < int(hf_config.vocab_size):
            raise ConfigError(f"ovis2_vision: {indicators} indicator tokens for the vocabulary")
        return dict(
            fields,
            hidden_size=hf_config.hidden_size,
            intermediate_size=hf_config.intermediate_size,
            num_hidden_layers=hf_config.num_hidden_layers,
            num_attention_heads=hf_config.num_attention_heads,
            patch_size=patch,
            rms_norm_eps=float(hf_config.rms_norm_eps),
            qkv_bias=bool(hf_config.qkv_bias),
            mlp_bias=bool(hf_config.mlp_bias),
            hidden_act=hf_config.hidden_act,
            vocab_size=int(hf_config.vocab_size),
            hidden_stride=stride,
            num_visual_indicator_tokens=indicators,
            tokenize_function=function,
        )

    @property
    def patches_per_side(self) -> int:
        return self.image_size[0] // self.patch_size

    @property
    def tokens_per_image(self) -> int:
        return (self.patches_per_side // self.hidden_stride) ** 2


class Ovis2VisionEmbeddings(nn.Module):
    """``rms_norm(patch_embedding(pixels)) + position_embedding``."""

    def __init__(self, config: Ovis2VisionConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.patch_embedding = PatchConv(config.num_channels, d, config.patch_size)
        self.position_embedding = PositionTable(config.patches_per_side**2, d)
        self.rms_norm = RMSNorm(d, config.rms_norm_eps)

    def forward(self, op, pixel_values):
        patches = self.rms_norm(op, self.patch_embedding(op, pixel_values))
        return op.Add(patches, self.position_embedding(op))


class Ovis2VisionAttention(nn.Module):
    def __init__(self, config: Ovis2VisionConfig) -> None:
        super().__init__()
        d, bias = config.hidden_size, config.qkv_bias
        self.q_proj = Linear(d, d, bias=bias)
        self.k_proj = Linear(d, d, bias=bias)
        self.v_proj = Linear(d, d, bias=bias)
        self.out_proj = Linear(d, d, bias=bias)
        self.num_heads = config.num_attention_heads
        self.scale = (d // self.num_heads) ** -0.5

    def forward(self, op, x):
        q, k, v = self.q_proj(op, x), self.k_proj(op, x), self.v_proj(op, x)
        return self.out_proj(
            op, bidirectional_attention(op, q, k, v, None, self.num_heads, self.scale)
        )


class Ovis2VisionLayer(nn.Module):
    """``x + attention(rms_norm1(x))``, then ``x + ffn(rms_norm2(x))``."""

    def __init__(self, config: Ovis2VisionConfig) -> None:
        super().__init__()
        d, eps = config.hidden_size, config.rms_norm_eps
        self.attention = Ovis2VisionAttention(config)
        self.ffn = GatedMLP(d, config.intermediate_size, config.hidden_act, config.mlp_bias)
        self.rms_norm1 = RMSNorm(d, eps)
        self.rms_norm2 = RMSNorm(d, eps)

    def forward(self, op, x):
        x = op.Add(x, self.attention(op, self.rms_norm1(op, x)))
        return op.Add(x, self.ffn(op, self.rms_norm2(op, x)))


class Ovis2VisionEncoder(nn.Module):
    def __init__(self, config: Ovis2VisionConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [Ovis2VisionLayer(config) for _ in range(config.num_hidden_layers)]
        )

    def forward(self, op, x):
        for layer in self.layers:
            x = layer(op, x)
        return x


class Ovis2VisionTransformer(nn.Module):
    def __init__(self, config: Ovis2VisionConfig) -> None:
        super().__init__()
        self.embeddings = Ovis2VisionEmbeddings(config)
        self.encoder = Ovis2VisionEncoder(config)
        self.rms_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, op, pixel_values):
        return self.rms_norm(op, self.encoder(op, self.embeddings(op, pixel_values)))


class Ovis2VisionModel(nn.Module):
    """HF ``Ovis2VisionModel`` up to its logits: ``[num_images, tokens, vocab - indicators]``,
    normed (the family applies the tokenize function)."""

    def __init__(self, config: Ovis2VisionConfig) -> None:
        super().__init__()
        self.config = config
        stride = config.hidden_stride
        visual = config.vocab_size - config.num_visual_indicator_tokens
        self.transformer = Ovis2VisionTransformer(config)
        self.head_linear = Linear(config.hidden_size * stride * stride, visual, bias=False)
        self.head_norm = LayerNorm(visual, 1e-5)  # torch's default eps, as transformers makes it

    def strided(self, op, x):
        """Each ``stride x stride`` block of patches concatenated: ``[n, blocks, stride^2 * d]``."""
        stride = self.config.hidden_stride
        if stride == 1:
            return x
        side, d = self.config.patches_per_side // stride, self.config.hidden_size
        x = op.Reshape(x, op.Constant(value_ints=[-1, side, stride, side, stride, d]))
        x = op.Transpose(x, perm=[0, 1, 3, 2, 4, 5])
        return op.Reshape(x, op.Constant(value_ints=[-1, side * side, stride * stride * d]))

    def forward(self, op, pixel_values):
        x = self.strided(op, self.transformer(op, pixel_values))
        return self.head_norm(op, self.head_linear(op, x))
