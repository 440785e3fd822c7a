"""VideoLLaMA3 over images: a SigLIP-style tower with 2-D rotary over flattened patches, a
two-layer projector, and a Qwen2 decoder.

The vision inputs are what ``VideoLlama3ImageProcessor`` returns: ``pixel_values
[patches, channels * patch_size^2]`` (each image's patches in row order) and
``image_grid_thw [images, 3]``. The tower (``model.vision_model``): the patch Conv2d (its
kernel is its stride) as a matmul by its flattened kernel, SigLIP encoder layers whose
attention rotates queries and keys by each patch's (row, column) (Qwen2-VL's axial
rotary) and stays within its image, ``post_layernorm``; then ``model.projector.readout``
(Linear, GELU, Linear) to the decoder's width, one token per patch. The decoder is
mobius-text's causal LM for ``text_config.model_type`` (Qwen2), with plain 1-D positions.

Images are not merged: the image processor's ``merge_size`` is 1 (transformers'
default; VideoLLaMA3 merges 2x2 for video frames only), so the tower's bilinear
``pixel_unshuffle`` is the identity. A package refuses another ``merge_size``
(:mod:`mobius_vision.processing.video_llama_3`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, apply_rotary
from mobius.errors import ConfigError
from mobius_vision.config import VisionLanguageConfig, composed_config
from mobius_vision.models._conv import Activation, Sequential
from mobius_vision.models._vl import VisionLanguageModel, text_decoder
from mobius_vision.models.qwen2_vl import VisionMlp, VisionRotary, patch_layout, same_group
from mobius_vision.models.qwen3_vl import _BiasedKernel

INT64 = ir.DataType.INT64


@dataclass
class VideoLlama3VisionConfig:
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_channels: int
    patch_size: int
    hidden_act: str
    layer_norm_eps: float
    rope_theta: float

    @classmethod
    def from_hf(cls, hf: Any) -> VideoLlama3VisionConfig:
        rope = dict(getattr(hf, "rope_parameters", None) or {})
        if rope.get("rope_type", "axial") != "axial":
            raise ConfigError(
                f"{hf.model_type}: the vision rotary is axial, not {rope['rope_type']}"
            )
        if isinstance(hf.patch_size, (list, tuple)):
            raise ConfigError(f"{hf.model_type}: patch_size {hf.patch_size!r} is not one int")
        if hf.hidden_size % hf.num_attention_heads:
            raise ConfigError(
                f"{hf.model_type}: hidden_size {hf.hidden_size} is not a multiple of "
                f"num_attention_heads {hf.num_attention_heads}"
            )
        return cls(
            model_type=hf.model_type,
            hidden_size=int(hf.hidden_size),
            intermediate_size=int(hf.intermediate_size),
            num_hidden_layers=int(hf.num_hidden_layers),
            num_attention_heads=int(hf.num_attention_heads),
            num_channels=int(hf.num_channels),
            patch_size=int(hf.patch_size),
            hidden_act=hf.hidden_act,
            layer_norm_eps=float(hf.layer_norm_eps),
            rope_theta=float(rope.get("rope_theta", 10000.0)),
        )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def patch_width(self) -> int:
        return self.num_channels * self.patch_size**2


class PatchEmbedding(nn.Module):
    """The biased Conv2d whose kernel is its stride, as a matmul by its flattened kernel."""

    def __init__(self, config: VideoLlama3VisionConfig) -> None:
        super().__init__()
        p = config.patch_size
        self.patch_embedding = _BiasedKernel([config.hidden_size, config.num_channels, p, p])

    def forward(self, op, pixel_values):
        kernel, bias = self.patch_embedding(op)  # [embed, channels * p * p], [embed]
        return op.Add(op.MatMul(pixel_values, op.Transpose(kernel, perm=[1, 0])), bias)


class RotaryAttention(nn.Module):
    """SigLIP's attention (``q_proj``... ``out_proj``) with 2-D rotary on queries and keys."""

    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.q_proj = Linear(dim, dim, bias=True)
        self.k_proj = Linear(dim, dim, bias=True)
        self.v_proj = Linear(dim, dim, bias=True)
        self.out_proj = Linear(dim, dim, bias=True)
        self.num_heads, self.head_dim, self.dim = num_heads, dim // num_heads, dim

    def forward(self, op, x, cos, sin, mask):
        heads = op.Constant(value_ints=[1, -1, self.num_heads, self.head_dim])

        def split(projection):  # [1, heads, patches, head_dim]
            return op.Transpose(op.Reshape(projection(op, x), heads), perm=[0, 2, 1, 3])

        q = apply_rotary(op, split(self.q_proj), cos, sin, self.head_dim)
        k = apply_rotary(op, split(self.k_proj), cos, sin, self.head_dim)
        y = op.Attention(q, k, split(self.v_proj), mask, scale=self.head_dim**-0.5)
        y = op.Transpose(y, perm=[0, 2, 1, 3])  # [1, patches, heads, head_dim]
        return self.out_proj(op, op.Reshape(y, op.Constant(value_ints=[-1, self.dim])))


class EncoderLayer(nn.Module):
    def __init__(self, config: VideoLlama3VisionConfig) -> None:
        super().__init__()
        d, eps = config.hidden_size, config.layer_norm_eps
        self.layer_norm1, self.layer_norm2 = LayerNorm(d, eps), LayerNorm(d, eps)
        self.self_attn = RotaryAttention(d, config.num_attention_heads)
        self.mlp = VisionMlp(d, config.intermediate_size, config.hidden_act)

    def forward(self, op, x, cos, sin, mask):
        x = op.Add(x, self.self_attn(op, self.layer_norm1(op, x), cos, sin, mask))
        return op.Add(x, self.mlp(op, self.layer_norm2(op, x)))


class Encoder(nn.Module):
    def __init__(self, config: VideoLlama3VisionConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList([EncoderLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, op, x, cos, sin, mask):
        for layer in self.layers:
            x = layer(op, x, cos, sin, mask)
        return x


class VideoLlama3VisionTower(nn.Module):
    """HF ``VideoLlama3VisionModel`` over unmerged images: ``[patches, hidden]``."""

    def __init__(self, config: VideoLlama3VisionConfig) -> None:
        super().__init__()
        self.embeddings = PatchEmbedding(config)
        self.rotary = VisionRotary(config.head_dim, config.rope_theta)
        self.encoder = Encoder(config)
        self.post_layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def forward(self, op, pixel_values, grid_thw):
        segment, row, col = patch_layout(op, pixel_values, grid_thw, 1)
        x = self.embeddings(op, pixel_values)  # [patches, hidden]
        cos, sin = self.rotary(op, row, col)
        x = self.encoder(op, x, cos, sin, same_group(op, segment))
        return self.post_layernorm(op, x)


class VideoLlama3Projector(nn.Module):
    """``readout``: Linear, GELU, Linear to the decoder's width."""

    def __init__(self, vision_hidden: int, text_hidden: int) -> None:
        super().__init__()
        self.readout = Sequential(
            [
                Linear(vision_hidden, text_hidden, True),
                Activation("gelu"),
                Linear(text_hidden, text_hidden, True),
            ]
        )

    def forward(self, op, x):
        return self.readout(op, x)


@dataclass
class VideoLlama3Config(VisionLanguageConfig):
    #: the tower's config class (the tower is the family's own, not a registered type)
    vision_config_class: ClassVar[type] = VideoLlama3VisionConfig

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        return dict(
            model_type=hf_config.model_type,
            vision=cls.vision_config_class.from_hf(hf_config.vision_config),
            text=composed_config(cls.text_hf_config(hf_config)),
            image_token_id=int(hf_config.image_token_id),
        )


class VideoLlama3ForConditionalGeneration(VisionLanguageModel):
    """``vision_tower`` (``tower_class`` over flattened patches and ``image_grid_thw``),
    ``multi_modal_projector`` (``readout``) and ``language_model``."""

    config_class = VideoLlama3Config
    tower_class = VideoLlama3VisionTower

    renames = {
        "model.vision_model.": "vision_tower.",
        "model.projector.": "multi_modal_projector.",
        "model.language_model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
    }

    def __init__(self, config: VideoLlama3Config) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.vision_tower = self.tower_class(config.vision)
        self.multi_modal_projector = self.make_projector(config)
        self.language_model = text_decoder(config.text)

    def make_projector(self, config: VideoLlama3Config) -> nn.Module:
        return VideoLlama3Projector(config.vision.hidden_size, config.text.hidden_size)

    def vision_inputs(self, dtype) -> list[tuple]:
        return [
            ("pixel_values", dtype, ["num_patches", self.config.vision.patch_width]),
            ("image_grid_thw", INT64, ["num_images", 3]),
        ]

    def image_features(self, op, pixel_values, image_grid_thw):
        patches = self.vision_tower(op, pixel_values, image_grid_thw)  # [patches, hidden]
        return self.multi_modal_projector(op, patches)  # [image_tokens, text_hidden]


MODEL_TYPES = {"video_llama_3": VideoLlama3ForConditionalGeneration}
