"""Qwen2-VL: a ViT over flattened patches with 2-D rotary, a patch merger, and an M-RoPE Qwen2.

The vision inputs are what ``Qwen2VLImageProcessor`` returns: ``pixel_values
[patches, channels * temporal_patch_size * patch_size^2]`` (every image's patches in
``spatial_merge_size``-block order) and ``image_grid_thw [images, 3]``. All patches go
through the tower as one sequence; a block mask keeps attention within each image's
frame (transformers' ``cu_seqlens``). The patch embedding (a Conv3d whose kernel is
its stride) is a matmul by the flattened kernel; the merger concatenates each run of
``merge^2`` patches. The decoder takes ``position_ids [3, batch, sequence]``, the
rope indices transformers computes with ``get_rope_index``.

The vision tower (``qwen2_vl_vision``) and text decoder (``qwen2_vl_text``) are built
here directly: the tower's inputs are not an image batch and the decoder's positions
are 3-D, so neither fits the standalone image or causal-LM contracts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, apply_rotary, default_inv_freq, get_activation
from mobius.errors import ConfigError
from mobius_text.models.qwen2_vl_text import Qwen2VLTextConfig, Qwen2VLTextForCausalLM
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._conv import Activation, Sequential
from mobius_vision.models._vl import VisionLanguageModel
from mobius_vision.models.qwen2_vl_genai import processor_config, rope_index_token_ids

INT64 = ir.DataType.INT64


@dataclass
class Qwen2VLVisionConfig:
    model_type: str
    depth: int
    embed_dim: int
    hidden_size: int  # the merger's output: the text decoder's width
    hidden_act: str
    mlp_ratio: float
    num_heads: int
    in_channels: int
    patch_size: int
    spatial_merge_size: int
    temporal_patch_size: int
    rope_theta: float

    @classmethod
    def from_hf(cls, hf: Any) -> Qwen2VLVisionConfig:
        theta = axial_rope_theta(hf)
        for name in ("patch_size", "temporal_patch_size"):
            if isinstance(getattr(hf, name), (list, tuple)):
                raise ConfigError(f"{hf.model_type}: {name} {getattr(hf, name)!r} is not one int")
        return cls(
            model_type=hf.model_type,
            depth=hf.depth,
            embed_dim=hf.embed_dim,
            hidden_size=hf.hidden_size,
            hidden_act=hf.hidden_act,
            mlp_ratio=hf.mlp_ratio,
            num_heads=hf.num_heads,
            in_channels=hf.in_channels,
            patch_size=int(hf.patch_size),
            spatial_merge_size=int(hf.spatial_merge_size),
            temporal_patch_size=int(hf.temporal_patch_size),
            rope_theta=theta,
        )

    @property
    def patch_width(self) -> int:
        return self.in_channels * self.temporal_patch_size * self.patch_size**2


def axial_rope_theta(hf: Any) -> float:
    """A patch tower's 2-D rotary base, from ``rope_parameters`` (which must be ``axial``)."""
    rope = dict(getattr(hf, "rope_parameters", None) or {})
    if rope.get("rope_type", "axial") != "axial":
        raise ConfigError(f"{hf.model_type}: the vision rotary is axial, not {rope['rope_type']}")
    return float(rope.get("rope_theta", 10000.0))


def _column(op, grid, i):
    return op.Squeeze(op.Slice(grid, [i], [i + 1], [1]), [1])  # [images]


def patch_images(op, pixel_values, grid_thw):
    """Per patch ``(index, image)`` ``[patches]``: its row in ``pixel_values`` and its image."""
    t, h, w = (_column(op, grid_thw, i) for i in range(3))
    ends = op.CumSum(op.Mul(t, op.Mul(h, w)), op.Constant(value_int=0))
    count = op.Squeeze(op.Shape(pixel_values, start=0, end=1), [0])
    index = op.Range(op.Constant(value_int=0), count, op.Constant(value_int=1))  # [patches]
    after = op.GreaterOrEqual(op.Unsqueeze(index, [1]), op.Unsqueeze(ends, [0]))
    return index, op.ReduceSum(op.Cast(after, to=INT64), [1], keepdims=0)


def patch_layout(op, pixel_values, grid_thw, merge: int):
    """Per patch ``(segment, row, column)`` ``[patches]``: its image frame and grid cell.

    The processor lays each frame's ``h x w`` patches out block by block
    (``merge x merge`` blocks, row-major, each block row-major), as transformers'
    ``get_vision_position_ids`` assumes.
    """
    t, h, w = (_column(op, grid_thw, i) for i in range(3))
    per_frame = op.Mul(h, w)
    tokens = op.Mul(t, per_frame)
    ends = op.CumSum(tokens, op.Constant(value_int=0))
    index, image = patch_images(op, pixel_values, grid_thw)
    local = op.Sub(index, op.Gather(op.Sub(ends, tokens), image))
    hw = op.Gather(per_frame, image)
    first_frame = op.Sub(op.CumSum(t, op.Constant(value_int=0)), t)
    segment = op.Add(op.Gather(first_frame, image), op.Div(local, hw))  # one per frame
    cell = op.Mod(local, hw)
    m = op.Constant(value_int=merge)
    mm = op.Constant(value_int=merge * merge)
    block, inner = op.Div(cell, mm), op.Mod(cell, mm)
    blocks_wide = op.Div(op.Gather(w, image), m)
    row = op.Add(op.Mul(op.Div(block, blocks_wide), m), op.Div(inner, m))
    col = op.Add(op.Mul(op.Mod(block, blocks_wide), m), op.Mod(inner, m))
    return segment, row, col


class VisionRotary(nn.Module):
    """cos/sin ``[1, patches, head_dim/2]``: ``row * f`` then ``column * f`` (f over head_dim/2)."""

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        self.inv_freq = default_inv_freq(theta, head_dim // 2)

    def forward(self, op, row, col):
        def angles(position):
            position = op.Unsqueeze(op.Cast(position, to=ir.DataType.FLOAT), [1])
            return op.Mul(position, op.Constant(value=ir.tensor(self.inv_freq)))

        freqs = op.Unsqueeze(op.Concat(angles(row), angles(col), axis=-1), [0])
        return op.Cos(freqs), op.Sin(freqs)


class VisionAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.qkv = Linear(dim, 3 * dim, bias=True)
        self.proj = Linear(dim, dim, bias=True)
        self.num_heads, self.head_dim, self.dim = num_heads, dim // num_heads, dim

    def forward(self, op, x, cos, sin, mask):
        qkv = op.Reshape(
            self.qkv(op, x), op.Constant(value_ints=[1, -1, 3, self.num_heads, self.head_dim])
        )
        qkv = op.Transpose(qkv, perm=[2, 0, 3, 1, 4])  # [3, 1, heads, patches, head_dim]
        q, k, v = (op.Squeeze(t, [0]) for t in op.Split(qkv, num_outputs=3, axis=0, _outputs=3))
        q = apply_rotary(op, q, cos, sin, self.head_dim)
        k = apply_rotary(op, k, cos, sin, self.head_dim)
        y = op.Attention(q, k, v, mask, scale=self.head_dim**-0.5)  # [1, heads, patches, hd]
        y = op.Transpose(y, perm=[0, 2, 1, 3])  # [1, patches, heads, head_dim]
        return self.proj(op, op.Reshape(y, op.Constant(value_ints=[-1, self.dim])))


class VisionMlp(nn.Module):
    def __init__(self, dim: int, hidden: int, act: str) -> None:
        super().__init__()
        self.fc1, self.fc2 = Linear(dim, hidden, bias=True), Linear(hidden, dim, bias=True)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.fc2(op, self.act(op, self.fc1(op, x)))


class Qwen2VLVisionBlock(nn.Module):
    def __init__(self, config: Qwen2VLVisionConfig) -> None:
        super().__init__()
        d = config.embed_dim
        self.norm1, self.norm2 = self.make_norm(d), self.make_norm(d)
        self.attn = VisionAttention(d, config.num_heads)
        self.mlp = self.make_mlp(config)

    def make_norm(self, dim: int) -> nn.Module:
        return LayerNorm(dim, 1e-6)

    def make_mlp(self, config: Qwen2VLVisionConfig) -> nn.Module:
        hidden = int(config.embed_dim * config.mlp_ratio)
        return VisionMlp(config.embed_dim, hidden, config.hidden_act)

    def forward(self, op, x, cos, sin, mask):
        x = op.Add(x, self.attn(op, self.norm1(op, x), cos, sin, mask))
        return op.Add(x, self.mlp(op, self.norm2(op, x)))


class PatchMerger(nn.Module):
    """``ln_q``, each run of ``merge^2`` patches concatenated, ``mlp`` (Linear, GELU, Linear)."""

    def __init__(self, dim: int, context_dim: int, merge: int) -> None:
        super().__init__()
        self.width = context_dim * merge * merge
        self.ln_q = self.make_norm(context_dim)
        self.mlp = Sequential(
            [
                Linear(self.width, self.width, True),
                Activation("gelu"),
                Linear(self.width, dim, True),
            ]
        )

    def make_norm(self, dim: int) -> nn.Module:
        return LayerNorm(dim, 1e-6)

    def forward(self, op, x):
        x = op.Reshape(self.ln_q(op, x), op.Constant(value_ints=[-1, self.width]))
        return self.mlp(op, x)


class _Kernel(nn.Module):
    """The Conv3d's ``weight [out, in, t, p, p]``, flattened to ``[out, in * t * p * p]``."""

    def __init__(self, shape: list[int]) -> None:
        super().__init__()
        self.weight = nn.Parameter(shape)
        self.width = int(np.prod(shape[1:]))

    def forward(self, op):
        return op.Reshape(self.weight, op.Constant(value_ints=[0, self.width]))


class PatchEmbed(nn.Module):
    """The Conv3d whose kernel is its stride, as a matmul by its flattened kernel."""

    def __init__(self, config: Qwen2VLVisionConfig) -> None:
        super().__init__()
        t, p = config.temporal_patch_size, config.patch_size
        self.proj = _Kernel([config.embed_dim, config.in_channels, t, p, p])
        self.width = config.patch_width

    def forward(self, op, pixel_values):
        kernel = op.Transpose(self.proj(op), perm=[1, 0])  # [in * t * p * p, embed]
        return op.MatMul(pixel_values, kernel)  # [patches, embed]


class Qwen2VLVisionTower(nn.Module):
    """HF ``Qwen2VisionTransformerPretrainedModel``: ``patch_embed``, ``blocks``, ``merger``."""

    block_class = Qwen2VLVisionBlock

    def __init__(self, config: Qwen2VLVisionConfig) -> None:
        super().__init__()
        self.config = config
        self.patch_embed = PatchEmbed(config)
        self.rotary = VisionRotary(config.embed_dim // config.num_heads, config.rope_theta)
        self.blocks = nn.ModuleList([self.block_class(config) for _ in range(config.depth)])
        self.merger = self.make_merger(config)

    def make_merger(self, config: Qwen2VLVisionConfig) -> nn.Module:
        return PatchMerger(config.hidden_size, config.embed_dim, config.spatial_merge_size)

    def forward(self, op, pixel_values, grid_thw):
        segment, row, col = patch_layout(op, pixel_values, grid_thw, self.config.spatial_merge_size)
        x = self.patch_embed(op, pixel_values)  # [patches, embed]
        cos, sin = self.rotary(op, row, col)
        masks = self.block_masks(op, segment, row, col)
        for block, mask in zip(self.blocks, masks, strict=True):
            x = block(op, x, cos, sin, mask)
        return self.merger(op, x)  # [image_tokens, text_hidden]

    def block_masks(self, op, segment, row, col) -> list:
        """Each block's ``[1, 1, patches, patches]`` mask (True: attend): its own image frame."""
        return [same_group(op, segment)] * len(self.blocks)


def same_group(op, *keys):
    """``[1, 1, patches, patches]``: True where two patches agree on every ``[patches]`` key."""
    same = None
    for key in keys:
        equal = op.Equal(op.Unsqueeze(key, [1]), op.Unsqueeze(key, [0]))
        same = equal if same is None else op.And(same, equal)
    return op.Unsqueeze(same, [0, 1])


@dataclass
class Qwen2VLConfig(VisionLanguageConfig):
    vision_config_class = Qwen2VLVisionConfig
    text_config_class = Qwen2VLTextConfig

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        return dict(
            model_type=hf_config.model_type,
            vision=cls.vision_config_class.from_hf(hf_config.vision_config),
            text=cls.text_config_class.from_hf(cls.text_hf_config(hf_config)),
            image_token_id=int(hf_config.image_token_id),
        )

    def genai_model_fields(self, source: dict[str, Any]) -> dict[str, Any]:
        """The token ids onnxruntime-genai's M-RoPE index looks for (:mod:`.qwen2_vl_genai`)."""
        return rope_index_token_ids(source)

    def genai_processor_config(self, preprocessor: dict[str, Any]) -> dict[str, Any]:
        """The generator's image preprocessing, which equals transformers' (:mod:`.qwen2_vl_genai`)."""
        return processor_config(self, preprocessor)


class Qwen2VLForConditionalGeneration(VisionLanguageModel):
    """The tower (``visual`` in the checkpoint) with its merger, and the M-RoPE decoder."""

    config_class = Qwen2VLConfig
    tower_class = Qwen2VLVisionTower
    decoder_class = Qwen2VLTextForCausalLM

    def __init__(self, config: Qwen2VLConfig) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.vision_tower = self.tower_class(config.vision)
        self.language_model = self.decoder_class(config.text)

    def vision_inputs(self, dtype) -> list[tuple]:
        return [
            ("pixel_values", dtype, ["num_patches", self.config.vision.patch_width]),
            ("image_grid_thw", INT64, ["num_images", 3]),
        ]

    def vision_modules(self) -> list[nn.Module]:
        return [self.vision_tower]

    def position_ids_shape(self) -> list:
        return [3, "batch", "sequence"]

    def image_features(self, op, pixel_values, image_grid_thw):
        return self.vision_tower(op, pixel_values, image_grid_thw)  # [image_tokens, text_hidden]

    renames = {
        "model.visual.": "vision_tower.",
        "visual.": "vision_tower.",
        "model.language_model.": "language_model.model.",
        "model.": "language_model.model.",  # transformers 4.4x layout
        "lm_head.": "language_model.lm_head.",
    }


MODEL_TYPES = {"qwen2_vl": Qwen2VLForConditionalGeneration}
