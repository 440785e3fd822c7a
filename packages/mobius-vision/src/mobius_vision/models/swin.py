"""Swin: patch tokens, stages of (shifted-)window attention with a relative position bias,
patch merging between stages, the mean token as the pooled output.

The module tree follows ``SwinFor*`` checkpoints as transformers saves them
(``swin.encoder.layers.0.blocks.1.attention.self.query``, ``...downsample.reduction``,
``classifier``); a bare ``SwinModel`` checkpoint gets the ``swin.`` prefix. Every shape
is static (the image size is fixed), so the shift masks and the relative-position
lookups are constants. ``last_hidden_state`` is ``[batch, tokens, C]`` and
``pooler_output`` ``[batch, C]``.

:class:`SwinBackbone` is transformers' ``SwinBackbone`` under a dense head (UperNet's
``backbone_config``): the embeddings' and each stage's tokens before its patch merging, as
``[batch, C, h, w]`` maps through their own LayerNorms (``hidden_states_norms.stage1``...).
It always partitions into full windows (transformers' ``always_partition=True``): a stage
smaller than the window is padded to it and odd blocks keep their shift.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, bidirectional_attention, get_activation
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig, image_size_pair
from mobius_vision.models._backbone_config import (
    StageNorms,
    out_features,
    require_backbone_type,
    stage_names,
)
from mobius_vision.models._conv import Conv2d, ConvNetForImageClassification
from mobius_vision.models.vit import ViTDense


@dataclass
class SwinConfig(VisionConfig):
    patch_size: int = 4
    embed_dim: int = 96
    depths: tuple[int, ...] = (2, 2, 6, 2)
    num_heads: tuple[int, ...] = (3, 6, 12, 24)
    window_size: int = 7
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    hidden_act: str = "gelu"
    use_absolute_embeddings: bool = False
    layer_norm_eps: float = 1e-5

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        patch_h, patch_w = image_size_pair(hf_config.patch_size)
        if patch_h != patch_w:
            raise ConfigError(f"{hf_config.model_type}: a non-square patch_size is not supported")
        return dict(
            super().hf_fields(hf_config),
            patch_size=patch_h,
            embed_dim=hf_config.embed_dim,
            depths=tuple(hf_config.depths),
            num_heads=tuple(hf_config.num_heads),
            window_size=int(hf_config.window_size),
            mlp_ratio=float(hf_config.mlp_ratio),
            qkv_bias=bool(hf_config.qkv_bias),
            hidden_act=hf_config.hidden_act,
            use_absolute_embeddings=bool(hf_config.use_absolute_embeddings),
            layer_norm_eps=hf_config.layer_norm_eps,
        )

    def __post_init__(self) -> None:
        self.refuse_unbuildable()

    def refuse_unbuildable(self) -> None:
        """ConfigError (from ``from_hf``) for the configs transformers itself cannot run."""
        if self.use_absolute_embeddings and any(s % self.patch_size for s in self.image_size):
            raise ConfigError(
                f"{self.model_type}: use_absolute_embeddings needs an image_size that is a "
                f"multiple of patch_size ({self.patch_size}); the table has too few positions"
            )
        for stage in range(len(self.depths)):
            if min(self.stage_size(stage)) < self.window_size:
                raise ConfigError(
                    f"{self.model_type}: stage {stage} is {self.stage_size(stage)} patches, "
                    f"smaller than window_size {self.window_size}; transformers clamps the "
                    "window there but keeps the full-window position bias, which cannot be added"
                )

    def stage_size(self, stage: int) -> tuple[int, int]:
        """``(height, width)`` in patches of a stage: the stem and each merge pad up (ceil)."""
        h, w = (math.ceil(s / self.patch_size) for s in self.image_size)
        for _ in range(stage):
            h, w = (h + 1) // 2, (w + 1) // 2
        return h, w

    def stage_dim(self, stage: int) -> int:
        return self.embed_dim * 2**stage

    @property
    def num_features(self) -> int:
        return self.stage_dim(len(self.depths) - 1)

    def window_and_shift(self, stage: int, block: int) -> tuple[int, int]:
        """Odd blocks shift by half a window, unless the window covers the whole stage."""
        if min(self.stage_size(stage)) <= self.window_size:
            return self.window_size, 0
        return self.window_size, self.window_size // 2 if block % 2 else 0


def relative_position_index(window: int) -> np.ndarray:
    """``[N*N]`` row of the ``(2w-1)^2`` table for each pair of the window's ``N = w*w`` tokens."""
    coords = np.stack(np.meshgrid(np.arange(window), np.arange(window), indexing="ij"))
    coords = coords.reshape(2, -1)
    rel = coords[:, :, None] - coords[:, None, :] + window - 1  # [2, N, N]
    return (rel[0] * (2 * window - 1) + rel[1]).reshape(-1).astype(np.int64)


def shift_mask(height: int, width: int, window: int, shift: int) -> np.ndarray:
    """``[windows, 1, N, N]``: -100 between tokens from different regions of the rolled map."""

    def regions(n: int) -> np.ndarray:
        idx = np.arange(n)
        return (idx >= n - window).astype(np.int64) + (idx >= n - shift)

    image = regions(height)[:, None] * 3 + regions(width)[None, :]
    rows, cols = height // window, width // window
    windows = image.reshape(rows, window, cols, window).transpose(0, 2, 1, 3)
    windows = windows.reshape(rows * cols, window * window)
    diff = windows[:, None, :] - windows[:, :, None]
    return np.where(diff != 0, -100.0, 0.0).astype(np.float32)[:, None]


def constant(op, array: np.ndarray, like: nn.Parameter):
    """A constant in the dtype of ``like`` (known when the graph is built; no CastLike to fold)."""
    return op.Constant(value=ir.tensor(array.astype(like.dtype.numpy())))


def roll(op, x, shift: int, height: int, width: int):
    """``torch.roll(x, (shift, shift), dims=(1, 2))`` of ``[batch, h, w, C]``."""
    for axis, size in ((1, height), (2, width)):
        k = shift % size
        if k:
            tail = op.Slice(x, [size - k], [size], [axis])
            x = op.Concat(tail, op.Slice(x, [0], [size - k], [axis]), axis=axis)
    return x


class SwinPatchEmbeddings(nn.Module):
    """``Conv2d(kernel=stride=patch)``, the image first padded bottom/right to a multiple."""

    def __init__(self, config: SwinConfig) -> None:
        super().__init__()
        p = config.patch_size
        pad_h, pad_w = (-s % p for s in config.image_size)
        self.projection = Conv2d(
            config.num_channels, config.embed_dim, p, stride=p, padding=(0, 0, pad_h, pad_w)
        )

    def forward(self, op, pixel_values):
        x = self.projection(op, pixel_values)  # [batch, C, h, w]
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, -1]))
        return op.Transpose(x, perm=[0, 2, 1])  # [batch, h*w, C]


class SwinEmbeddings(nn.Module):
    def __init__(self, config: SwinConfig) -> None:
        super().__init__()
        self.patch_embeddings = SwinPatchEmbeddings(config)
        self.norm = LayerNorm(config.embed_dim)  # torch's default eps, not layer_norm_eps
        h, w = config.stage_size(0)
        absolute = config.use_absolute_embeddings
        self.position_embeddings = nn.Parameter([1, h * w, config.embed_dim]) if absolute else None

    def forward(self, op, pixel_values):
        x = self.norm(op, self.patch_embeddings(op, pixel_values))
        if self.position_embeddings is not None:
            x = op.Add(x, self.position_embeddings)
        return x  # [batch, h*w, C]


class SwinSelfAttention(nn.Module):
    """Attention inside each window, biased by the relative positions (and the shift mask)."""

    key_bias = True  # with qkv_bias
    mask_copies = 1  # how many times the shift mask is added to the scores

    def __init__(self, config: SwinConfig, stage: int, window: int, mask) -> None:
        super().__init__()
        dim, heads = config.stage_dim(stage), config.num_heads[stage]
        self.query = Linear(dim, dim, bias=config.qkv_bias)
        self.key = Linear(dim, dim, bias=config.qkv_bias and self.key_bias)
        self.value = Linear(dim, dim, bias=config.qkv_bias)
        self.heads, self.window, self.mask = heads, window, mask
        self.scale = (dim // heads) ** -0.5
        self.make_position_bias(config, stage)

    def make_position_bias(self, config: SwinConfig, stage: int) -> None:
        self.relative_position_bias_table = nn.Parameter([(2 * self.window - 1) ** 2, self.heads])

    def bias_table(self, op):
        return self.relative_position_bias_table  # [(2w-1)^2, heads]

    def position_bias(self, op):
        n = self.window**2
        index = op.Constant(value=ir.tensor(relative_position_index(self.window)))
        bias = op.Gather(self.bias_table(op), index, axis=0)  # [N*N, heads]
        bias = op.Reshape(bias, op.Constant(value_ints=[n, n, self.heads]))
        return op.Transpose(bias, perm=[2, 0, 1])  # [heads, N, N]

    def attention_bias(self, op, x):
        """``[1, heads, N, N]``, or with the shift mask one per window of every image."""
        bias = op.Unsqueeze(self.position_bias(op), [0])
        if self.mask is None:
            return bias
        mask = constant(op, self.mask * self.mask_copies, self.query.weight)
        bias = op.Add(bias, mask)  # [windows, heads, N, N]
        # x is [batch * windows, N, C], the window index fastest: repeat the block per image.
        images = op.Div(op.Shape(x, start=0, end=1), op.Constant(value_ints=[len(self.mask)]))
        return op.Tile(bias, op.Concat(images, op.Constant(value_ints=[1, 1, 1]), axis=0))

    def forward(self, op, x):  # [batch * windows, N, C]
        q, k, v = self.query(op, x), self.key(op, x), self.value(op, x)
        bias = self.attention_bias(op, x)
        return bidirectional_attention(op, q, k, v, bias, self.heads, self.scale)


class SwinAttention(nn.Module):
    self_attention_class = SwinSelfAttention

    def __init__(self, config: SwinConfig, stage: int, window: int, mask) -> None:
        super().__init__()
        dim = config.stage_dim(stage)
        self.self = self.self_attention_class(config, stage, window, mask)
        self.output = ViTDense(dim, dim)

    def forward(self, op, x):
        return self.output(op, self.self(op, x))


class SwinIntermediate(ViTDense):
    def __init__(self, dim: int, hidden: int, act: str) -> None:
        super().__init__(dim, hidden)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.act(op, self.dense(op, x))


class SwinLayer(nn.Module):
    """Pre-norm block: ``x + windowed_attention(norm(x))``, then ``x + mlp(norm(x))``."""

    attention_class = SwinAttention

    def __init__(self, config: SwinConfig, stage: int, block: int) -> None:
        super().__init__()
        dim, eps = config.stage_dim(stage), config.layer_norm_eps
        self.height, self.width = config.stage_size(stage)
        self.window, self.shift = config.window_and_shift(stage, block)
        ws = self.window
        self.padded = tuple(math.ceil(s / ws) * ws for s in (self.height, self.width))
        mask = shift_mask(*self.padded, ws, self.shift) if self.shift else None
        hidden = int(config.mlp_ratio * dim)
        self.layernorm_before = LayerNorm(dim, eps)
        self.attention = self.attention_class(config, stage, ws, mask)
        self.layernorm_after = LayerNorm(dim, eps)
        self.intermediate = SwinIntermediate(dim, hidden, config.hidden_act)
        self.output = ViTDense(hidden, dim)
        self.dim = dim

    def windowed(self, op, x):
        """Attention in (shifted) windows of the padded map: ``[batch, h*w, C]`` in and out."""
        h, w, ws, c = self.height, self.width, self.window, self.dim
        hp, wp = self.padded
        x = op.Reshape(x, op.Constant(value_ints=[-1, h, w, c]))
        if (hp, wp) != (h, w):
            x = op.Pad(x, op.Constant(value_ints=[0, 0, 0, 0, 0, hp - h, wp - w, 0]))
        x = roll(op, x, -self.shift, hp, wp)  # [batch, hp, wp, C]
        x = op.Reshape(x, op.Constant(value_ints=[-1, hp // ws, ws, wp // ws, ws, c]))
        x = op.Transpose(x, perm=[0, 1, 3, 2, 4, 5])
        x = op.Reshape(x, op.Constant(value_ints=[-1, ws * ws, c]))  # [batch * windows, N, C]
        x = self.attention(op, x)
        x = op.Reshape(x, op.Constant(value_ints=[-1, hp // ws, wp // ws, ws, ws, c]))
        x = op.Transpose(x, perm=[0, 1, 3, 2, 4, 5])
        x = op.Reshape(x, op.Constant(value_ints=[-1, hp, wp, c]))
        x = roll(op, x, self.shift, hp, wp)
        if (hp, wp) != (h, w):
            x = op.Slice(x, [0, 0], [h, w], [1, 2])
        return op.Reshape(x, op.Constant(value_ints=[-1, h * w, c]))

    def mlp(self, op, x):
        return self.output(op, self.intermediate(op, x))

    def forward(self, op, x):  # [batch, h*w, C]
        x = op.Add(x, self.windowed(op, self.layernorm_before(op, x)))
        return op.Add(x, self.mlp(op, self.layernorm_after(op, x)))


class SwinPatchMerging(nn.Module):
    """Each 2x2 block of tokens (odd sides padded) concatenated, then ``reduction(norm(x))``."""

    def __init__(self, config: SwinConfig, stage: int) -> None:
        super().__init__()
        dim = config.stage_dim(stage)
        self.height, self.width = config.stage_size(stage)
        self.reduction = Linear(4 * dim, 2 * dim, bias=False)
        self.norm = self.make_norm(dim)
        self.dim = dim

    def make_norm(self, dim: int) -> LayerNorm:
        return LayerNorm(4 * dim)

    def merge(self, op, x):
        h, w, c = self.height, self.width, self.dim
        x = op.Reshape(x, op.Constant(value_ints=[-1, h, w, c]))
        if h % 2 or w % 2:
            x = op.Pad(x, op.Constant(value_ints=[0, 0, 0, 0, 0, h % 2, w % 2, 0]))
        h, w = h + h % 2, w + w % 2
        x = op.Reshape(x, op.Constant(value_ints=[-1, h // 2, 2, w // 2, 2, c]))
        # channel blocks in torch's order x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2], x[1::2, 1::2]
        x = op.Transpose(x, perm=[0, 1, 3, 4, 2, 5])  # [batch, h/2, w/2, col, row, C]
        return op.Reshape(x, op.Constant(value_ints=[-1, h * w // 4, 4 * c]))

    def forward(self, op, x):
        return self.reduction(op, self.norm(op, self.merge(op, x)))


class SwinStage(nn.Module):
    layer_class = SwinLayer
    merging_class = SwinPatchMerging

    def __init__(self, config: SwinConfig, stage: int) -> None:
        super().__init__()
        depth = config.depths[stage]
        self.blocks = nn.ModuleList([self.layer_class(config, stage, i) for i in range(depth)])
        last = stage == len(config.depths) - 1
        self.downsample = None if last else self.merging_class(config, stage)

    def forward(self, op, x):
        for block in self.blocks:
            x = block(op, x)
        return x if self.downsample is None else self.downsample(op, x)


class SwinEncoder(nn.Module):
    stage_class = SwinStage

    def __init__(self, config: SwinConfig) -> None:
        super().__init__()
        stages = range(len(config.depths))
        self.layers = nn.ModuleList([self.stage_class(config, i) for i in stages])

    def forward(self, op, x):
        for stage in self.layers:
            x = stage(op, x)
        return x


class SwinModel(nn.Module):
    encoder_class = SwinEncoder
    final_norm = True

    def __init__(self, config: SwinConfig) -> None:
        super().__init__()
        self.embeddings = SwinEmbeddings(config)
        self.encoder = self.encoder_class(config)
        norm = LayerNorm(config.num_features, config.layer_norm_eps)
        self.layernorm = norm if self.final_norm else None

    def forward(self, op, pixel_values):
        x = self.encoder(op, self.embeddings(op, pixel_values))  # [batch, tokens, C]
        if self.layernorm is not None:
            x = self.layernorm(op, x)
        return x, op.ReduceMean(x, op.Constant(value_ints=[1]), keepdims=0)


@dataclass
class SwinBackboneConfig(SwinConfig):
    """Swin as a backbone: the maps it returns, by transformers' stage names."""

    out_features: tuple[str, ...] = field(default=("stage4",))
    #: The ``model_type`` of the backbone configs this class reads.
    backbone_type: ClassVar[str] = "swin"

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        # A variant's classifier (swinv2, convnextv2...) inherits this class's backbone_class.
        require_backbone_type(hf_config, cls.backbone_type)
        fields = super().hf_fields(hf_config)
        return dict(fields, out_features=out_features(hf_config, len(fields["depths"])))

    def refuse_unbuildable(self) -> None:
        """Only the absolute table's size: windows are always full, whatever the stage size."""
        if self.use_absolute_embeddings and any(s % self.patch_size for s in self.image_size):
            super().refuse_unbuildable()

    def window_and_shift(self, stage: int, block: int) -> tuple[int, int]:
        return self.window_size, self.window_size // 2 if block % 2 else 0

    def feature_channels(self) -> list[int]:
        """The channels of each returned map (the stem's is ``embed_dim``)."""
        names = stage_names(len(self.depths))
        dims = [self.embed_dim, *(self.stage_dim(i) for i in range(len(self.depths)))]
        return [dict(zip(names, dims, strict=True))[name] for name in self.out_features]

    def feature_grids(self) -> list[tuple[int, int]]:
        """The ``(h, w)`` of each returned map: its stage's patch grid."""
        names = stage_names(len(self.depths))
        grids = [self.stage_size(0), *(self.stage_size(i) for i in range(len(self.depths)))]
        return [dict(zip(names, grids, strict=True))[name] for name in self.out_features]


class SwinStageBeforeMerging(SwinStage):
    """A stage returning ``(tokens before the patch merging, tokens after it)``."""

    def forward(self, op, x):
        for block in self.blocks:
            x = block(op, x)
        return x, (x if self.downsample is None else self.downsample(op, x))


class SwinStagesEncoder(SwinEncoder):
    """The encoder returning every stage's tokens before its patch merging, in order."""

    stage_class = SwinStageBeforeMerging

    def forward(self, op, x) -> list:
        outputs = []
        for stage in self.layers:
            before, x = stage(op, x)
            outputs.append(before)
        return outputs


class SwinBackbone(nn.Module):
    """transformers' ``SwinBackbone``: ``feature_maps``, one per ``out_features`` entry."""

    config_class = SwinBackboneConfig
    embeddings_class = SwinEmbeddings
    encoder_class = SwinStagesEncoder
    #: The encoder's final LayerNorm, which a backbone checkpoint keeps and never applies, and
    #: the lookup tables older checkpoints saved (constants here).
    ignored: tuple[str, ...] = ("swin.layernorm.*", "*.relative_position_index")

    def __init__(self, config: SwinBackboneConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = self.embeddings_class(config)
        self.encoder = self.encoder_class(config)
        channels = zip(config.out_features, config.feature_channels(), strict=True)
        self.hidden_states_norms = StageNorms({name: LayerNorm(c) for name, c in channels})

    def feature_channels(self) -> list[int]:
        return self.config.feature_channels()

    def forward(self, op, pixel_values) -> list:
        c = self.config
        x = self.embeddings(op, pixel_values)  # [batch, h*w, C]
        stages = self.encoder(op, x)
        tokens = dict(zip(stage_names(len(stages)), [x, *stages], strict=True))
        maps = {name: tokens[name] for name in c.out_features}
        normed = self.hidden_states_norms(op, maps)  # over the channels, still tokens
        out = []
        for x, channels, (h, w) in zip(
            normed, c.feature_channels(), c.feature_grids(), strict=True
        ):
            x = op.Transpose(x, perm=[0, 2, 1])
            out.append(op.Reshape(x, op.Constant(value_ints=[0, channels, h, w])))
        return out


class SwinForImageClassification(ConvNetForImageClassification):
    """The encoder and, with ``--head image-classification``, the classifier on the mean token."""

    config_class = SwinConfig
    model_class = SwinModel
    base_model_prefix = "swin"
    #: What a dense head (UperNet) puts under itself (:mod:`._backbone`).
    backbone_class = SwinBackbone

    @staticmethod
    def any_size_backbone_class() -> type:
        """The backbone under heads whose graph takes any image size (MaskFormer's):
        imported here, as :mod:`._swin_any_size` builds on this module."""
        from mobius_vision.models._swin_any_size import AnySizeSwinBackbone

        return AnySizeSwinBackbone

    def make_classifier(self, config) -> nn.Module:
        return Linear(config.num_features, config.num_labels, bias=True)

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        h, w = c.stage_size(len(c.depths) - 1)
        return {
            "last_hidden_state": ["batch", h * w, c.num_features],
            "pooler_output": ["batch", c.num_features],
            "logits": ["batch", c.num_labels],
        }

    @property
    def ignored(self) -> tuple[str, ...]:
        """The lookup tables older checkpoints saved (constants here) and, without the head, the classifier."""
        constants = ("*.relative_position_index", "*.relative_coords_table")
        return constants + (() if self.classifier is not None else ("classifier.*",))


MODEL_TYPES = {"swin": SwinForImageClassification}
