"""Kimi K2.5 (``kimi_k25``): a MoonViT-style patch tower, a merge-and-project head, DeepSeek-V3.

The vision inputs are what Kimi K2.5's image processor returns: ``pixel_values
[patches, channels, patch, patch]`` (every image's patches row-major) and
``image_grid_thw [images, 3]`` (``t`` is 1 for an image). The tower embeds each patch (a
Conv2d whose kernel is its stride), adds the learned ``pos_emb_height x pos_emb_width``
position table resampled to the image's grid (bicubic, Keys ``a = -0.75``, half-pixel
centres, edges clamped), and runs pre-norm layers whose attention stays within each image
and rotates queries and keys by the patch's (column, row), interleaved. After
``final_layernorm`` each ``merge_kernel_size`` block of patches becomes one image token:
``mm_projector`` norms each patch, concatenates the block and maps it by ``proj``
(Linear, GELU, Linear) to the decoder's width. Videos (``t > 1``, whose frames are
averaged) are not built.

Module names follow the hub's checkpoints (``vision_tower.encoder.blocks.N.wqkv``...,
``mm_projector.proj.0``); the names transformers' ``save_pretrained`` writes otherwise
(``vision_tower.encoder.patch_embed``, ``model.mm_projector.pre_norm``, and
``language_model.model.blocks`` for the decoder's layers) are renamed too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, apply_rotary, get_activation
from mobius.config import first_of
from mobius.errors import ConfigError
from mobius_vision.config import VisionLanguageConfig, composed_config
from mobius_vision.models._conv import Activation, Sequential
from mobius_vision.models._vl import VisionLanguageModel, text_decoder
from mobius_vision.models.qwen2_vl import (
    INT64,
    VisionRotary,
    _column,
    axial_rope_theta,
    patch_images,
    patch_layout,
    same_group,
)
from mobius_vision.models.qwen3_vl import _BiasedKernel

FLOAT = ir.DataType.FLOAT


@dataclass
class KimiK25VisionConfig:
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    hidden_act: str
    patch_size: int
    pos_emb_side: int
    merge_kernel_size: tuple[int, int]
    rope_theta: float

    @classmethod
    def from_hf(cls, hf: Any) -> KimiK25VisionConfig:
        if not isinstance(hf.patch_size, int) or isinstance(hf.patch_size, bool):
            raise ConfigError(f"{hf.model_type}: patch_size {hf.patch_size!r} is not one int")
        if hf.pos_emb_height != hf.pos_emb_width:
            # transformers indexes the table as a square of pos_emb_height a side
            raise ConfigError(f"{hf.model_type}: the position table is not square")
        merge = tuple(hf.merge_kernel_size)
        if len(merge) != 2 or not all(isinstance(m, int) and m > 0 for m in merge):
            raise ConfigError(f"{hf.model_type}: merge_kernel_size {merge!r} is not two ints")
        head_dim, rest = divmod(hf.hidden_size, hf.num_attention_heads)
        if rest or head_dim % 4:
            raise ConfigError(f"{hf.model_type}: the head size is not a multiple of 4")
        return cls(
            model_type=hf.model_type,
            hidden_size=int(hf.hidden_size),
            intermediate_size=int(hf.intermediate_size),
            num_hidden_layers=int(hf.num_hidden_layers),
            num_attention_heads=int(hf.num_attention_heads),
            hidden_act=hf.hidden_act,
            patch_size=hf.patch_size,
            pos_emb_side=int(hf.pos_emb_height),
            merge_kernel_size=merge,
            rope_theta=axial_rope_theta(hf),
        )


def bicubic_taps(op, index, size, side: int):
    """Per patch the four taps ``[patches, 4]`` into a ``side``-long table and their weights,
    resampling an axis of ``size`` patches (``F.interpolate(mode="bicubic",
    align_corners=False)``, edges clamped: transformers' ``_interpolation_axis_taps_weights``)."""
    src = op.Sub(
        op.Div(
            op.Mul(op.Add(op.Cast(index, to=FLOAT), op.Constant(value_float=0.5)), side * 1.0),
            op.Cast(size, to=FLOAT),
        ),
        op.Constant(value_float=0.5),
    )
    floor = op.Floor(src)
    offsets = op.Constant(value_floats=[-1.0, 0.0, 1.0, 2.0])
    taps = op.Add(op.Unsqueeze(op.Cast(floor, to=INT64), [1]), op.Cast(offsets, to=INT64))
    taps = op.Clip(taps, op.Constant(value_int=0), op.Constant(value_int=side - 1))
    d = op.Abs(op.Sub(op.Unsqueeze(op.Sub(src, floor), [1]), offsets))  # [patches, 4]
    a = -0.75

    def poly(*coefficients):  # Horner's rule in d, highest power first
        value = op.Constant(value_float=coefficients[0])
        for c in coefficients[1:]:
            value = op.Add(op.Mul(value, d), op.Constant(value_float=c))
        return value

    near = poly(a + 2, -(a + 3), 0.0, 1.0)
    far = poly(a, -5 * a, 8 * a, -4 * a)
    weights = op.Where(op.LessOrEqual(d, op.Constant(value_float=1.0)), near, far)
    return taps, weights


class KimiK25PositionEmbeddings(nn.Module):
    """The learned ``weight [side, side, hidden]`` resampled to each image's grid."""

    def __init__(self, config: KimiK25VisionConfig) -> None:
        super().__init__()
        side, d = config.pos_emb_side, config.hidden_size
        self.weight = nn.Parameter([side, side, d])
        self.side, self.dim = side, d

    def forward(self, op, row, col, height, width):
        """``[patches, hidden]`` for the patches at ``row``/``col`` of ``height x width`` grids."""
        h_taps, h_weights = bicubic_taps(op, row, height, self.side)
        w_taps, w_weights = bicubic_taps(op, col, width, self.side)
        side = op.Constant(value_int=self.side)
        sixteen = op.Constant(value_ints=[0, 16])
        index = op.Add(op.Unsqueeze(op.Mul(h_taps, side), [2]), op.Unsqueeze(w_taps, [1]))
        weight = op.Mul(op.Unsqueeze(h_weights, [2]), op.Unsqueeze(w_weights, [1]))
        table = op.Reshape(self.weight, op.Constant(value_ints=[-1, self.dim]))
        rows = op.Gather(table, op.Reshape(index, sixteen), axis=0)  # [patches, 16, hidden]
        weight = op.CastLike(op.Unsqueeze(op.Reshape(weight, sixteen), [2]), rows)  # f16 builds
        return op.ReduceSum(op.Mul(rows, weight), [1], keepdims=0)


class KimiK25PatchEmbed(nn.Module):
    """``proj`` (the Conv2d as a matmul by its flattened kernel) plus ``pos_emb``."""

    def __init__(self, config: KimiK25VisionConfig) -> None:
        super().__init__()
        p = config.patch_size
        self.proj = _BiasedKernel([config.hidden_size, 3, p, p])
        self.pos_emb = KimiK25PositionEmbeddings(config)
        self.width = 3 * p * p

    def forward(self, op, pixel_values, row, col, height, width):
        kernel, bias = self.proj(op)
        flat = op.Reshape(pixel_values, op.Constant(value_ints=[-1, self.width]))
        x = op.Add(op.MatMul(flat, op.Transpose(kernel, perm=[1, 0])), bias)
        return op.Add(x, self.pos_emb(op, row, col, height, width))  # [patches, hidden]


class KimiK25VisionRotary(VisionRotary):
    """cos/sin ``[1, patches, head_dim/2]``: ``column * f_i`` and ``row * f_i`` interleaved,
    for the checkpoint's interleaved (complex-pair) query and key channels."""

    def forward(self, op, row, col):
        def angles(position):
            position = op.Unsqueeze(op.Cast(position, to=FLOAT), [1])
            return op.Unsqueeze(op.Mul(position, op.Constant(value=ir.tensor(self.inv_freq))), [2])

        freqs = op.Concat(angles(col), angles(row), axis=2)  # [patches, head_dim/4, 2]
        freqs = op.Unsqueeze(op.Reshape(freqs, op.Constant(value_ints=[0, -1])), [0])
        return op.Cos(freqs), op.Sin(freqs)


class KimiK25VisionBlock(nn.Module):
    """Pre-norm (``norm0``) attention by the fused ``wqkv`` and ``wo``, then (``norm1``) the MLP.

    The checkpoint keeps MoonViT's layout: each query and key head's channels in rotary
    pairs ``(2i, 2i + 1)``, which an interleaved rotary rotates as they are (transformers
    permutes them to halves when it loads them).
    """

    def __init__(self, config: KimiK25VisionConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.norm0, self.norm1 = LayerNorm(d, 1e-5), LayerNorm(d, 1e-5)
        self.wqkv = Linear(d, 3 * d, bias=True)
        self.wo = Linear(d, d, bias=True)
        self.mlp = KimiK25VisionMlp(d, config.intermediate_size, config.hidden_act)
        self.num_heads, self.head_dim, self.dim = (
            config.num_attention_heads,
            d // config.num_attention_heads,
            d,
        )

    def attention(self, op, x, cos, sin, mask):
        qkv = op.Reshape(
            self.wqkv(op, x), op.Constant(value_ints=[1, -1, 3, self.num_heads, self.head_dim])
        )
        qkv = op.Transpose(qkv, perm=[2, 0, 3, 1, 4])  # [3, 1, heads, patches, head_dim]
        q, k, v = (op.Squeeze(t, [0]) for t in op.Split(qkv, num_outputs=3, axis=0, _outputs=3))
        q = apply_rotary(op, q, cos, sin, self.head_dim, interleaved=True)
        k = apply_rotary(op, k, cos, sin, self.head_dim, interleaved=True)
        y = op.Attention(q, k, v, mask, scale=self.head_dim**-0.5)
        y = op.Transpose(y, perm=[0, 2, 1, 3])  # [1, patches, heads, head_dim]
        return self.wo(op, op.Reshape(y, op.Constant(value_ints=[-1, self.dim])))

    def forward(self, op, x, cos, sin, mask):
        x = op.Add(x, self.attention(op, self.norm0(op, x), cos, sin, mask))
        return op.Add(x, self.mlp(op, self.norm1(op, x)))


class KimiK25VisionMlp(nn.Module):
    """``fc0 -> act -> fc1``."""

    def __init__(self, dim: int, hidden: int, act: str) -> None:
        super().__init__()
        self.fc0, self.fc1 = Linear(dim, hidden, bias=True), Linear(hidden, dim, bias=True)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.fc1(op, self.act(op, self.fc0(op, x)))


def merge_order(op, pixel_values, grid_thw, row, col, kernel: tuple[int, int]):
    """Per patch ``[patches]`` its row after the merge: the patches of each ``kernel`` block
    together (row-major within the block), the blocks row-major, image after image."""
    kh, kw = kernel
    _, image = patch_images(op, pixel_values, grid_thw)
    cells = op.Mul(_column(op, grid_thw, 1), _column(op, grid_thw, 2))  # an image's patches
    start = op.Gather(op.Sub(op.CumSum(cells, op.Constant(value_int=0)), cells), image)
    blocks_wide = op.Div(op.Gather(_column(op, grid_thw, 2), image), op.Constant(value_int=kw))
    block = op.Add(
        op.Mul(op.Div(row, op.Constant(value_int=kh)), blocks_wide),
        op.Div(col, op.Constant(value_int=kw)),
    )
    within = op.Add(
        op.Mul(op.Mod(row, op.Constant(value_int=kh)), op.Constant(value_int=kw)),
        op.Mod(col, op.Constant(value_int=kw)),
    )
    return op.Add(start, op.Add(op.Mul(block, op.Constant(value_int=kh * kw)), within))


class KimiK25VisionTower(nn.Module):
    """HF ``Kimi_K25VisionModel``, named as the hub's checkpoints: ``patch_embed``
    (``proj``, ``pos_emb``), ``blocks``, ``final_layernorm``."""

    def __init__(self, config: KimiK25VisionConfig) -> None:
        super().__init__()
        self.config = config
        self.patch_embed = KimiK25PatchEmbed(config)
        head_dim = config.hidden_size // config.num_attention_heads
        self.rotary = KimiK25VisionRotary(head_dim, config.rope_theta)
        self.blocks = nn.ModuleList(
            [KimiK25VisionBlock(config) for _ in range(config.num_hidden_layers)]
        )
        self.final_layernorm = LayerNorm(config.hidden_size, 1e-5)

    def forward(self, op, pixel_values, grid_thw):
        """``[patches, hidden]`` in merge order (each kernel block's patches together)."""
        segment, row, col = patch_layout(op, pixel_values, grid_thw, 1)  # row-major patches
        _, image = patch_images(op, pixel_values, grid_thw)
        height = op.Gather(_column(op, grid_thw, 1), image)
        width = op.Gather(_column(op, grid_thw, 2), image)
        x = self.patch_embed(op, pixel_values, row, col, height, width)
        cos, sin = self.rotary(op, row, col)
        mask = same_group(op, segment)
        for block in self.blocks:
            x = block(op, x, cos, sin, mask)
        x = self.final_layernorm(op, x)
        order = merge_order(op, pixel_values, grid_thw, row, col, self.config.merge_kernel_size)
        # a permutation (the processor's grids are whole blocks): every row is written
        return op.ScatterND(x, op.Unsqueeze(order, [1]), x)


class KimiK25MultimodalProjection(nn.Module):
    """``pre_norm`` per patch, each block's patches concatenated, ``proj``: Linear, GELU, Linear."""

    def __init__(self, vision: int, block: int, text: int, eps: float) -> None:
        super().__init__()
        self.width = vision * block
        self.pre_norm = LayerNorm(vision, eps)
        self.proj = Sequential(
            [
                Linear(self.width, self.width, True),
                Activation("gelu"),  # nn.GELU(): the exact erf form
                Linear(self.width, text, True),
            ]
        )

    def forward(self, op, x):
        x = op.Reshape(self.pre_norm(op, x), op.Constant(value_ints=[-1, self.width]))
        return self.proj(op, x)


@dataclass
class KimiK25Config(VisionLanguageConfig):
    projection_layer_norm_eps: float = 1e-5

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        # the tower is built here: kimi_k25_vision takes patches, not an image batch
        vision = KimiK25VisionConfig.from_hf(hf_config.vision_config)
        if hf_config.projection_hidden_size != vision.hidden_size:
            raise ConfigError(
                f"kimi_k25: projection_hidden_size {hf_config.projection_hidden_size} differs "
                f"from the vision hidden_size {vision.hidden_size} (the projector norms its patches)"
            )
        return dict(
            model_type=hf_config.model_type,
            vision=vision,
            text=composed_config(cls.text_hf_config(hf_config)),
            image_token_id=int(first_of(hf_config, "image_token_id", "image_token_index")),
            projection_layer_norm_eps=float(hf_config.projection_layer_norm_eps),
        )


class KimiK25ForConditionalGeneration(VisionLanguageModel):
    """:class:`KimiK25VisionTower`, :class:`KimiK25MultimodalProjection`, DeepSeek-V3."""

    config_class = KimiK25Config

    def __init__(self, config: KimiK25Config) -> None:
        nn.Module.__init__(self)
        self.config = config
        self.vision_tower = KimiK25VisionTower(config.vision)
        kh, kw = config.vision.merge_kernel_size
        self.multi_modal_projector = KimiK25MultimodalProjection(
            config.vision.hidden_size,
            kh * kw,
            config.text.hidden_size,
            config.projection_layer_norm_eps,
        )
        self.language_model = text_decoder(config.text)

    def vision_inputs(self, dtype) -> list[tuple]:
        p = self.config.vision.patch_size
        return [
            ("pixel_values", dtype, ["num_patches", 3, p, p]),
            ("image_grid_thw", INT64, ["num_images", 3]),
        ]

    def image_features(self, op, pixel_values, image_grid_thw):
        return self.multi_modal_projector(op, self.vision_tower(op, pixel_values, image_grid_thw))

    #: The hub's names (and those transformers' save writes, which differ in two places).
    renames = {
        "vision_tower.encoder.patch_embed.": "vision_tower.patch_embed.",
        "vision_tower.encoder.": "vision_tower.",
        "model.mm_projector.": "multi_modal_projector.",
        "mm_projector.": "multi_modal_projector.",
        "language_model.model.blocks.": "language_model.model.layers.",
    }


MODEL_TYPES = {"kimi_k25": KimiK25ForConditionalGeneration}
