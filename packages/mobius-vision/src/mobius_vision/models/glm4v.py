"""GLM-4.1V (``glm4v``): Qwen2-VL's patch tower with RMS norms, a learned position table
resampled to each image's grid, a strided-conv downsample, and a GLM-4 M-RoPE decoder.

The vision inputs are Qwen2-VL's (``pixel_values [patches, c * t * p * p]`` in merge-block
order, ``image_grid_thw [images, 3]``), and so are the 2-D vision rotary, the per-image
attention mask and the decoder's ``[3, batch, sequence]`` positions. What GLM adds:

- the patch Conv3d carries a bias, and an RMSNorm (``post_conv_layernorm``) follows it;
- ``embeddings.position_embedding`` (a square table learnt at ``image_size``) is sampled
  bicubically at each patch's centre, scaled to its image's grid, and added
  (transformers' ``grid_sample``, ``align_corners=False``, border padding: ONNX
  ``GridSample`` with ``mode="cubic"``, which uses the same ``a = -0.75`` kernel);
- after ``post_layernorm`` each ``merge x merge`` block goes through ``downsample``, a
  Conv2d whose kernel is its stride: a matmul by its flattened kernel;
- the merger is ``proj``, LayerNorm, GELU, then a gated MLP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import GatedMLP, LayerNorm, Linear, RMSNorm
from mobius.errors import ConfigError
from mobius_text.models.glm4v_text import Glm4vTextConfig, Glm4vTextForCausalLM
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models.qwen2_vl import (
    PatchEmbed,
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLVisionBlock,
    Qwen2VLVisionConfig,
    Qwen2VLVisionTower,
    VisionAttention,
    patch_images,
    patch_layout,
)

FLOAT = ir.DataType.FLOAT


@dataclass
class Glm4vVisionConfig(Qwen2VLVisionConfig):
    intermediate_size: int = 13696
    rms_norm_eps: float = 1e-5
    attention_bias: bool = False
    image_size: int = 336

    @classmethod
    def from_hf(cls, hf: Any) -> Glm4vVisionConfig:
        # Qwen2-VL's names: the tower's width is embed_dim, the merger's hidden_size
        proxy = dict(vars(hf), embed_dim=hf.hidden_size, hidden_size=hf.out_hidden_size)
        proxy.update(mlp_ratio=0, num_heads=hf.num_heads, depth=hf.depth, model_type=hf.model_type)
        fields = vars(Qwen2VLVisionConfig.from_hf(_Attributes(proxy)))
        image_size = hf.image_size
        if isinstance(image_size, (list, tuple)):
            if len(set(image_size)) != 1:
                raise ConfigError(f"{hf.model_type}: image_size {image_size} is not square")
            image_size = image_size[0]
        if int(image_size) < fields["patch_size"]:
            raise ConfigError(f"{hf.model_type}: image_size {image_size} under one patch")
        return cls(
            **fields,
            intermediate_size=int(hf.intermediate_size),
            rms_norm_eps=float(hf.rms_norm_eps),
            attention_bias=bool(hf.attention_bias),
            image_size=int(image_size),
        )

    @property
    def position_side(self) -> int:
        """The side of the learnt position table (patches)."""
        return self.image_size // self.patch_size


class _Attributes:
    def __init__(self, values: dict) -> None:
        self.__dict__.update(values)


class _BiasedKernel(nn.Module):
    """A Conv3d/Conv2d's ``weight`` and ``bias``; the weight flattened ``[out, rest]`` with
    its input axes in ``perm`` order."""

    def __init__(self, shape: list[int], perm: list[int]) -> None:
        super().__init__()
        self.weight = nn.Parameter(shape)
        self.bias = nn.Parameter([shape[0]])
        self.perm = perm

    def forward(self, op, x):
        kernel = op.Transpose(self.weight, perm=self.perm)
        kernel = op.Reshape(kernel, op.Constant(value_ints=[0, -1]))  # [out, rest]
        return op.Add(op.MatMul(x, op.Transpose(kernel, perm=[1, 0])), self.bias)


class Glm4vPatchEmbed(PatchEmbed):
    """Qwen2-VL's patch matmul, with the Conv3d's bias."""

    def __init__(self, config: Glm4vVisionConfig) -> None:
        nn.Module.__init__(self)
        t, p = config.temporal_patch_size, config.patch_size
        self.proj = _BiasedKernel([config.embed_dim, config.in_channels, t, p, p], [0, 1, 2, 3, 4])

    def forward(self, op, pixel_values):
        return self.proj(op, pixel_values)  # [patches, embed]


class _PositionTable(nn.Module):
    """The learnt ``weight [side * side, embed]`` as an image ``[1, embed, side, side]``."""

    def __init__(self, side: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([side * side, dim])
        self.side, self.dim = side, dim

    def forward(self, op):
        table = op.Reshape(self.weight, op.Constant(value_ints=[self.side, self.side, self.dim]))
        return op.Unsqueeze(op.Transpose(table, perm=[2, 0, 1]), [0])


class Glm4vPositionEmbedding(nn.Module):
    """``position_embedding``: the learnt table sampled at each patch, per image grid."""

    def __init__(self, config: Glm4vVisionConfig) -> None:
        super().__init__()
        self.position_embedding = _PositionTable(config.position_side, config.embed_dim)
        self.dim = config.embed_dim

    def forward(self, op, x, row, col, grid_h, grid_w):
        """``x [patches, embed]`` plus the table at ``((col + .5) / grid_w, (row + .5) / grid_h)``."""
        table = self.position_embedding(op)  # [1, embed, side, side]

        def normalised(coordinate, size):  # to [-1, 1], the centre of each patch
            centre = op.Add(op.Cast(coordinate, to=FLOAT), op.Constant(value_float=0.5))
            scaled = op.Div(centre, op.Cast(size, to=FLOAT))
            return op.Sub(
                op.Mul(scaled, op.Constant(value_float=2.0)), op.Constant(value_float=1.0)
            )

        grid = op.Concat(
            op.Unsqueeze(normalised(col, grid_w), [1]),
            op.Unsqueeze(normalised(row, grid_h), [1]),
            axis=1,
        )  # [patches, 2]: x then y
        grid = op.Unsqueeze(grid, [0, 2])  # [1, patches, 1, 2]
        sampled = op.GridSample(
            table, grid, mode="cubic", padding_mode="border", align_corners=0
        )  # [1, embed, patches, 1]
        sampled = op.Reshape(sampled, op.Constant(value_ints=[self.dim, -1]))
        return op.Add(x, op.Transpose(sampled, perm=[1, 0]))


class Glm4vVisionAttention(VisionAttention):
    """Qwen2-VL's attention with ``attention_bias`` on ``qkv`` and no bias on ``proj``."""

    def __init__(self, dim: int, num_heads: int, bias: bool) -> None:
        super().__init__(dim, num_heads)
        self.qkv = Linear(dim, 3 * dim, bias=bias)
        self.proj = Linear(dim, dim, bias=False)


class Glm4vVisionBlock(Qwen2VLVisionBlock):
    def __init__(self, config: Glm4vVisionConfig) -> None:
        nn.Module.__init__(self)
        d, eps = config.embed_dim, config.rms_norm_eps
        self.norm1, self.norm2 = RMSNorm(d, eps), RMSNorm(d, eps)
        self.attn = Glm4vVisionAttention(d, config.num_heads, config.attention_bias)
        self.mlp = GatedMLP(d, config.hidden_size, config.hidden_act, bias=False)


class Glm4vPatchMerger(GatedMLP):
    """``proj``, ``post_projection_norm`` (LayerNorm), GELU, then the gated MLP."""

    def __init__(self, dim: int, context_dim: int, act: str) -> None:
        super().__init__(dim, context_dim, act, bias=False)
        self.proj = Linear(dim, dim, bias=False)
        self.post_projection_norm = LayerNorm(dim, 1e-5)

    def forward(self, op, x):
        x = self.post_projection_norm(op, self.proj(op, x))
        return super().forward(op, op.Gelu(x))


class Glm4vVisionTower(Qwen2VLVisionTower):
    """HF ``Glm4vVisionModel``: see the module docstring."""

    block_class = Glm4vVisionBlock

    def __init__(self, config: Glm4vVisionConfig) -> None:
        super().__init__(config)
        eps, merge = config.rms_norm_eps, config.spatial_merge_size
        self.patch_embed = Glm4vPatchEmbed(config)
        self.post_conv_layernorm = RMSNorm(config.embed_dim, eps)
        self.embeddings = Glm4vPositionEmbedding(config)
        self.post_layernorm = RMSNorm(config.embed_dim, eps)
        # Conv2d [out, embed, merge, merge] over a block laid out (row, column, channel)
        self.downsample = _BiasedKernel(
            [config.hidden_size, config.embed_dim, merge, merge], [0, 2, 3, 1]
        )

    def make_merger(self, config: Glm4vVisionConfig) -> nn.Module:
        return Glm4vPatchMerger(config.hidden_size, config.intermediate_size, config.hidden_act)

    def forward(self, op, pixel_values, grid_thw):
        merge = self.config.spatial_merge_size
        segment, row, col = patch_layout(op, pixel_values, grid_thw, merge)
        _, image = patch_images(op, pixel_values, grid_thw)
        grid_h = op.Gather(op.Squeeze(op.Slice(grid_thw, [1], [2], [1]), [1]), image)
        grid_w = op.Gather(op.Squeeze(op.Slice(grid_thw, [2], [3], [1]), [1]), image)
        x = self.post_conv_layernorm(op, self.patch_embed(op, pixel_values))  # [patches, embed]
        cos, sin = self.rotary(op, row, col)
        x = self.embeddings(op, x, row, col, grid_h, grid_w)
        for block, mask in zip(self.blocks, self.block_masks(op, segment, row, col), strict=True):
            x = block(op, x, cos, sin, mask)
        x = self.post_layernorm(op, x)
        blocks = op.Reshape(x, op.Constant(value_ints=[-1, merge * merge * self.config.embed_dim]))
        return self.merger(op, self.downsample(op, blocks))  # [image_tokens, text_hidden]


@dataclass
class Glm4vConfig(Qwen2VLConfig):
    vision_config_class = Glm4vVisionConfig
    text_config_class = Glm4vTextConfig
    # onnxruntime-genai's Qwen-VL hooks do not apply: it has no GLM-4V class
    genai_model_fields = VisionLanguageConfig.genai_model_fields
    genai_processor_config = VisionLanguageConfig.genai_processor_config


class Glm4vForConditionalGeneration(Qwen2VLForConditionalGeneration):
    """The tower (``model.visual``) and the GLM-4 M-RoPE decoder; Qwen2-VL's contract."""

    config_class = Glm4vConfig
    tower_class = Glm4vVisionTower
    decoder_class = Glm4vTextForCausalLM


MODEL_TYPES = {"glm4v": Glm4vForConditionalGeneration}
