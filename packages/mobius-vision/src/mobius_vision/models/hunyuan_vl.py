"""HunYuan-VL (HunyuanOCR): a ViT over flattened patches, a per-image convolution merger, and a
Hunyuan decoder over multi-axis rotary positions.

The vision inputs are what ``HunYuanVLImageProcessor`` returns: ``pixel_values [patches,
channels * patch_size^2]`` (each image's patches in row order) and ``image_grid_thw
[images, 3]``. The tower embeds each patch (its Conv2d as a matmul), adds the learned
position grid (``position_embedding`` past its first row) resampled bilinearly with
half-pixel centres to each image's grid, and runs LayerNorm blocks that attend within
each image. The merger (transformers' ``patch_merger``), per image: RMSNorm, a ``merge x merge``
stride convolution, GELU, a 1x1 convolution, a learned ``image_newline`` after each
row of merge blocks, ``mlp`` to the decoder's width, learned ``image_begin`` and
``image_end`` around the image, RMSNorm. An image thus fills ``rows * (columns + 1) +
2`` placeholders. The decoder is mobius-text's ``hunyuan_vl_text`` over
``position_ids [axes, batch, sequence]`` (the model's ``get_rope_index``).

Submodules carry the hub checkpoint's names (``vit.``, ``perceive``, the Megatron MLP's
``dense_h_to_4h``...), the layout transformers' ``save_pretrained`` writes back too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import Embedding, LayerNorm, Linear, RMSNorm, get_activation
from mobius.errors import ConfigError
from mobius_text.models.hunyuan_vl_text import HunYuanVLTextConfig, HunYuanVLTextForCausalLM
from mobius_vision.config import VisionLanguageConfig
from mobius_vision.models._conv import Activation, Sequential
from mobius_vision.models._vl import VisionLanguageModel
from mobius_vision.models.glm4v import _BiasedKernel
from mobius_vision.models.paddleocr_vl import half_pixel_taps
from mobius_vision.models.qwen2_vl import _column, patch_images, patch_layout, same_group

INT64 = ir.DataType.INT64


@dataclass
class HunYuanVLVisionConfig:
    model_type: str
    hidden_size: int
    intermediate_size: int
    hidden_act: str
    num_attention_heads: int
    num_hidden_layers: int
    num_channels: int
    patch_size: int
    spatial_merge_size: int
    max_image_size: int
    eps: float
    text_hidden_size: int

    @classmethod
    def from_hf(cls, hf: Any, text_hidden_size: int) -> HunYuanVLVisionConfig:
        if getattr(hf, "temporal_patch_size", 1) != 1:
            raise ConfigError(
                f"{hf.model_type}: temporal_patch_size {hf.temporal_patch_size!r} != 1"
            )
        if getattr(hf, "interpolate_mode", "bilinear") != "bilinear":
            raise ConfigError(f"{hf.model_type}: interpolate_mode {hf.interpolate_mode!r}")
        ints = ("patch_size", "spatial_merge_size", "max_image_size", "num_channels")
        for name in ints:
            if not isinstance(getattr(hf, name), int) or getattr(hf, name) < 1:
                raise ConfigError(
                    f"{hf.model_type}: {name} {getattr(hf, name)!r} is not a positive int"
                )
        if hf.max_image_size < hf.patch_size:
            raise ConfigError(f"{hf.model_type}: max_image_size is under one patch")
        return cls(
            model_type=hf.model_type,
            hidden_size=hf.hidden_size,
            intermediate_size=hf.intermediate_size,
            hidden_act=hf.hidden_act,
            num_attention_heads=hf.num_attention_heads,
            num_hidden_layers=hf.num_hidden_layers,
            num_channels=hf.num_channels,
            patch_size=hf.patch_size,
            spatial_merge_size=hf.spatial_merge_size,
            max_image_size=hf.max_image_size,
            eps=float(hf.rms_norm_eps),
            text_hidden_size=text_hidden_size,
        )

    @property
    def patch_width(self) -> int:
        return self.num_channels * self.patch_size**2

    @property
    def position_side(self) -> int:
        """The side of the learned position grid, in patches."""
        return self.max_image_size // self.patch_size


class HunYuanVLVisionEmbeddings(nn.Module):
    """``patch_embedding`` (a Conv2d as a matmul) plus the resampled ``position_embedding`` grid."""

    def __init__(self, config: HunYuanVLVisionConfig) -> None:
        super().__init__()
        p, d = config.patch_size, config.hidden_size
        self.patch_embedding = _BiasedKernel([d, config.num_channels, p, p], [0, 1, 2, 3])
        self.side = config.position_side
        self.position_embedding = Embedding(self.side**2 + 1, d)  # row 0: an unused cls

    def forward(self, op, pixel_values, grid_thw, row, col, image):
        h_taps, h_weights = half_pixel_taps(
            op, row, op.Gather(_column(op, grid_thw, 1), image), self.side
        )
        w_taps, w_weights = half_pixel_taps(
            op, col, op.Gather(_column(op, grid_thw, 2), image), self.side
        )
        side = op.Constant(value_int=self.side)
        # the four corners past the cls row, h-tap major: [patches, 2, 2] -> [patches, 4]
        index = op.Add(op.Unsqueeze(op.Mul(h_taps, side), [2]), op.Unsqueeze(w_taps, [1]))
        index = op.Add(index, op.Constant(value_int=1))
        weight = op.Mul(op.Unsqueeze(h_weights, [2]), op.Unsqueeze(w_weights, [1]))
        corners = op.Constant(value_ints=[0, 4])
        table = self.position_embedding(op, op.Reshape(index, corners))  # [patches, 4, hidden]
        weight = op.Unsqueeze(op.Reshape(weight, corners), [2])
        positions = op.ReduceSum(op.Mul(table, op.CastLike(weight, table)), [1], keepdims=0)
        return op.Add(self.patch_embedding(op, pixel_values), positions)


class HunYuanVLVisionAttention(nn.Module):
    def __init__(self, dim: int, num_heads: int) -> None:
        super().__init__()
        self.q_proj = Linear(dim, dim, bias=True)
        self.k_proj = Linear(dim, dim, bias=True)
        self.v_proj = Linear(dim, dim, bias=True)
        self.o_proj = Linear(dim, dim, bias=True)
        self.num_heads, self.head_dim, self.dim = num_heads, dim // num_heads, dim

    def forward(self, op, x, mask):
        heads = op.Constant(value_ints=[1, -1, self.num_heads, self.head_dim])

        def split(proj):
            return op.Transpose(op.Reshape(proj(op, x), heads), perm=[0, 2, 1, 3])

        q, k, v = split(self.q_proj), split(self.k_proj), split(self.v_proj)
        y = op.Attention(q, k, v, mask, scale=self.head_dim**-0.5)  # [1, heads, patches, hd]
        y = op.Reshape(op.Transpose(y, perm=[0, 2, 1, 3]), op.Constant(value_ints=[-1, self.dim]))
        return self.o_proj(op, y)


class HunYuanVLVisionMlp(nn.Module):
    """The checkpoint's Megatron names: ``dense_h_to_4h``, the activation, ``dense_4h_to_h``."""

    def __init__(self, dim: int, hidden: int, act: str) -> None:
        super().__init__()
        self.dense_h_to_4h = Linear(dim, hidden, bias=True)
        self.dense_4h_to_h = Linear(hidden, dim, bias=True)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.dense_4h_to_h(op, self.act(op, self.dense_h_to_4h(op, x)))


class HunYuanVLVisionBlock(nn.Module):
    """Pre-norm LayerNorm block (``input_layernorm``, ``post_attention_layernorm`` in the hub
    checkpoint; transformers' ``layer_norm1``/``layer_norm2``)."""

    def __init__(self, config: HunYuanVLVisionConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.input_layernorm = LayerNorm(d, config.eps)
        self.self_attn = HunYuanVLVisionAttention(d, config.num_attention_heads)
        self.post_attention_layernorm = LayerNorm(d, config.eps)
        self.mlp = HunYuanVLVisionMlp(d, config.intermediate_size, config.hidden_act)

    def forward(self, op, x, mask):
        x = op.Add(x, self.self_attn(op, self.input_layernorm(op, x), mask))
        return op.Add(x, self.mlp(op, self.post_attention_layernorm(op, x)))


def as_row(op, vector):
    """A ``[dim]`` parameter as a ``[1, dim]`` row."""
    return op.Unsqueeze(vector, [0])


def merged_token_sources(op, grid_thw, merge: int, blocks):
    """Per merged token ``[tokens]``: its row in the table ``[merge blocks, newline, begin, end]``.

    Image ``i`` of ``rows x columns`` merge blocks gives ``begin``, then each row's blocks
    followed by ``newline``, then ``end``; ``blocks`` (a scalar) counts every image's blocks.
    """
    m = op.Constant(value_int=merge)
    rows = op.Div(_column(op, grid_thw, 1), m)
    columns = op.Div(_column(op, grid_thw, 2), m)
    one, two = op.Constant(value_int=1), op.Constant(value_int=2)
    counts = op.Add(op.Mul(rows, op.Add(columns, one)), two)  # [images]
    ends = op.CumSum(counts, op.Constant(value_int=0))
    total = op.ReduceSum(counts, keepdims=0)
    index = op.Range(op.Constant(value_int=0), total, one)
    after = op.GreaterOrEqual(op.Unsqueeze(index, [1]), op.Unsqueeze(ends, [0]))
    image = op.ReduceSum(op.Cast(after, to=INT64), [1], keepdims=0)
    local = op.Sub(index, op.Gather(op.Sub(ends, counts), image))
    image_blocks = op.Mul(rows, columns)
    first_block = op.Gather(
        op.Sub(op.CumSum(image_blocks, op.Constant(value_int=0)), image_blocks), image
    )
    width = op.Add(op.Gather(columns, image), one)  # a row's blocks and its newline
    cell = op.Max(op.Sub(local, one), op.Constant(value_int=0))
    row, col = op.Div(cell, width), op.Mod(cell, width)
    block = op.Add(first_block, op.Add(op.Mul(row, op.Sub(width, one)), col))
    source = op.Where(op.Equal(col, op.Sub(width, one)), blocks, block)
    source = op.Where(
        op.Equal(local, op.Sub(op.Gather(counts, image), one)), op.Add(blocks, two), source
    )
    return op.Where(op.Equal(local, op.Constant(value_int=0)), op.Add(blocks, one), source)


class HunYuanVLPatchMerger(nn.Module):
    """HF ``HunYuanVLVisionPatchMerger`` (``perceive`` in the hub checkpoint) over every image
    at once (see the module docstring); ``proj`` is its stride conv, GELU and 1x1 conv."""

    def __init__(self, config: HunYuanVLVisionConfig) -> None:
        super().__init__()
        d, m, t = config.hidden_size, config.spatial_merge_size, config.text_hidden_size
        self.merge, self.block_width = m, m * m * d
        self.before_rms = RMSNorm(d, config.eps)
        # the block's patches come (row, column, channels): the kernel's input axes in that order
        self.proj = Sequential(
            [
                _BiasedKernel([2 * d, d, m, m], [0, 2, 3, 1]),
                Activation(config.hidden_act),
                _BiasedKernel([4 * d, 2 * d, 1, 1], [0, 1, 2, 3]),
            ]
        )
        self.image_newline = nn.Parameter([4 * d])
        self.mlp = Linear(4 * d, t, bias=True)
        self.image_begin, self.image_end = nn.Parameter([t]), nn.Parameter([t])
        self.after_rms = RMSNorm(t, config.eps)

    def forward(self, op, x, block_order, grid_thw):
        x = op.Gather(self.before_rms(op, x), block_order)  # [patches, hidden], block by block
        x = op.Reshape(x, op.Constant(value_ints=[-1, self.block_width]))
        blocks = self.proj(op, x)  # [blocks, 4 hidden]
        count = op.Squeeze(op.Shape(blocks, start=0, end=1), [0])
        table = op.Concat(blocks, as_row(op, self.image_newline), axis=0)
        begin, end = as_row(op, self.image_begin), as_row(op, self.image_end)
        table = op.Concat(self.mlp(op, table), begin, end, axis=0)
        tokens = op.Gather(table, merged_token_sources(op, grid_thw, self.merge, count))
        return self.after_rms(op, tokens)  # [image_tokens, text_hidden]


class HunYuanVLVisionTower(nn.Module):
    """HF ``HunYuanVLVisionTransformer`` (``vit`` in the hub checkpoint): ``embeddings``,
    ``layers``, ``perceive`` (the merger)."""

    def __init__(self, config: HunYuanVLVisionConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = HunYuanVLVisionEmbeddings(config)
        self.layers = nn.ModuleList(
            [HunYuanVLVisionBlock(config) for _ in range(config.num_hidden_layers)]
        )
        self.perceive = HunYuanVLPatchMerger(config)

    def forward(self, op, pixel_values, grid_thw):
        index, image = patch_images(op, pixel_values, grid_thw)
        width = op.Gather(_column(op, grid_thw, 2), image)
        patches = op.ReduceProd(grid_thw, [1], keepdims=0)  # [images]
        ends = op.CumSum(patches, op.Constant(value_int=0))
        first = op.Gather(op.Sub(ends, patches), image)  # each patch's image's first patch
        local = op.Sub(index, first)
        row, col = op.Div(local, width), op.Mod(local, width)
        x = self.embeddings(op, pixel_values, grid_thw, row, col, image)  # [patches, hidden]
        mask = same_group(op, image)
        for layer in self.layers:
            x = layer(op, x, mask)
        # the merger reads merge blocks: the row-order patch behind each block-order slot
        _, block_row, block_col = patch_layout(
            op, pixel_values, grid_thw, self.config.spatial_merge_size
        )
        block_order = op.Add(first, op.Add(op.Mul(block_row, width), block_col))
        return self.perceive(op, x, block_order, grid_thw)


@dataclass
class HunYuanVLConfig(VisionLanguageConfig):
    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        text = HunYuanVLTextConfig.from_hf(cls.text_hf_config(hf_config))
        return dict(
            model_type=hf_config.model_type,
            vision=HunYuanVLVisionConfig.from_hf(hf_config.vision_config, text.hidden_size),
            text=text,
            image_token_id=int(hf_config.image_token_id),
        )


class HunYuanVLForConditionalGeneration(VisionLanguageModel):
    """The tower with its merger (``vision_tower``) and the multi-axis rotary decoder."""

    config_class = HunYuanVLConfig
    tower_class = HunYuanVLVisionTower

    def __init__(self, config: HunYuanVLConfig) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.vision_tower = self.tower_class(config.vision)
        self.language_model = HunYuanVLTextForCausalLM(config.text)

    def vision_inputs(self, dtype) -> list[tuple]:
        return [
            ("pixel_values", dtype, ["num_patches", self.config.vision.patch_width]),
            ("image_grid_thw", INT64, ["num_images", 3]),
        ]

    def vision_modules(self) -> list[nn.Module]:
        return [self.vision_tower]

    def position_ids_shape(self) -> list:
        return [self.language_model.position_axes(), "batch", "sequence"]

    def image_features(self, op, pixel_values, image_grid_thw):
        return self.vision_tower(op, pixel_values, image_grid_thw)  # [image_tokens, text_hidden]

    @property
    def ignored(self) -> tuple[str, ...]:
        """``image_sep``, which the merger holds and transformers never reads."""
        return (*super().ignored, "vision_tower.perceive.image_sep")

    #: The hub checkpoint's layout (which transformers' ``save_pretrained`` writes back).
    renames = {
        "vit.": "vision_tower.",
        "model.": "language_model.model.",
        "lm_head.": "language_model.lm_head.",
    }


MODEL_TYPES = {"hunyuan_vl": HunYuanVLForConditionalGeneration}
