"""Hiera as SAM2 uses it (transformers' ``Sam2HieraDetModel``): a hierarchical ViT.

A strided convolution makes channels-last patches; a background position embedding,
resized bicubically to the patch grid, plus a window embedding tiled over it, is added.
Stages of multi-scale blocks follow: each block attends within windows (or globally,
for the blocks listed in ``global_attention_blocks``); the first block of a stage widens
the channels and, for the first ``num_query_pool_stages`` stages after the first, max-pools
its queries (and the residual) by ``query_stride``, halving the grid. Each stage's last
output is returned, high resolution first (the FPN neck of :mod:`.sam2` reads them).

Every size is static: the image size is fixed at build, so the windows' padding and the
grids are computed in Python, as transformers computes them at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Conv2d, LayerNorm, Linear, get_activation
from mobius.errors import ConfigError
from mobius_vision.config import image_size_pair
from mobius_vision.models._common import torch_bicubic_resize


def _square(value: Any, name: str, model_type: str) -> int:
    """One side of a square setting (an int, or a pair of equal ints)."""
    height, width = image_size_pair(value)
    if height != width or height < 1:
        raise ConfigError(f"{model_type}: {name} {value} is not a positive square")
    return height


@dataclass
class HieraConfig:
    """The sizes of transformers' ``Sam2HieraDetConfig``, checked."""

    model_type: str
    image_size: tuple[int, int]
    num_channels: int
    hidden_size: int
    patch_kernel_size: int
    patch_stride: int
    patch_padding: int
    query_stride: int
    background_size: tuple[int, int]  # window_positional_embedding_background_size
    num_query_pool_stages: int
    blocks_per_stage: list[int]
    embed_dim_per_stage: list[int]
    num_attention_heads_per_stage: list[int]
    window_size_per_stage: list[int]
    global_attention_blocks: list[int]
    mlp_ratio: float
    hidden_act: str
    layer_norm_eps: float

    @classmethod
    def from_hf(cls, hf: Any) -> HieraConfig:
        kind = str(hf.model_type)

        def ints(name: str) -> list[int]:
            value = getattr(hf, name)
            if not isinstance(value, (list, tuple)) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value
            ):
                raise ConfigError(f"{kind}: {name} must be a list of integers, got {value!r}")
            return list(value)

        config = cls(
            model_type=kind,
            image_size=image_size_pair(hf.image_size),
            num_channels=int(hf.num_channels),
            hidden_size=int(hf.hidden_size),
            patch_kernel_size=_square(hf.patch_kernel_size, "patch_kernel_size", kind),
            patch_stride=_square(hf.patch_stride, "patch_stride", kind),
            patch_padding=image_size_pair(hf.patch_padding)[0],
            query_stride=_square(hf.query_stride, "query_stride", kind),
            background_size=image_size_pair(hf.window_positional_embedding_background_size),
            num_query_pool_stages=int(hf.num_query_pool_stages),
            blocks_per_stage=ints("blocks_per_stage"),
            embed_dim_per_stage=ints("embed_dim_per_stage"),
            num_attention_heads_per_stage=ints("num_attention_heads_per_stage"),
            window_size_per_stage=ints("window_size_per_stage"),
            global_attention_blocks=ints("global_attention_blocks"),
            mlp_ratio=float(hf.mlp_ratio),
            hidden_act=str(hf.hidden_act),
            layer_norm_eps=float(hf.layer_norm_eps),
        )
        config.check()
        return config

    def check(self) -> None:
        """Refuse what transformers' blocks could not compute either, by name."""
        kind, stages = self.model_type, len(self.blocks_per_stage)
        per_stage = (
            self.embed_dim_per_stage,
            self.num_attention_heads_per_stage,
            self.window_size_per_stage,
        )
        if stages < 1 or any(len(values) != stages for values in per_stage):
            raise ConfigError(f"{kind}: the per-stage lists must all have one entry per stage")
        if (
            min(self.blocks_per_stage + self.embed_dim_per_stage) < 1
            or min(self.num_attention_heads_per_stage) < 1
        ):
            raise ConfigError(f"{kind}: blocks, widths and heads per stage must be positive")
        if self.hidden_size != self.embed_dim_per_stage[0]:
            raise ConfigError(
                f"{kind}: hidden_size {self.hidden_size} is not the first stage's width "
                f"{self.embed_dim_per_stage[0]}"
            )
        for dim, heads in zip(
            self.embed_dim_per_stage, self.num_attention_heads_per_stage, strict=True
        ):
            if dim % heads:
                raise ConfigError(f"{kind}: a stage width {dim} is not a multiple of {heads} heads")
        height, width = self.grid
        window = self.window_size_per_stage[0]
        if window < 1 or height % window or width % window:
            raise ConfigError(
                f"{kind}: the window position embedding ({window}) does not tile the "
                f"{height}x{width} patch grid"
            )
        if min(self.background_size) < 1 or min(self.window_size_per_stage) < 0:
            raise ConfigError(f"{kind}: negative window or background sizes")

    @property
    def grid(self) -> tuple[int, int]:
        """The patch grid ``(height, width)`` of the convolution's output."""
        k, s, p = self.patch_kernel_size, self.patch_stride, self.patch_padding
        return tuple((side + 2 * p - k) // s + 1 for side in self.image_size)

    def block_settings(self) -> list[tuple[int, int, int, int, int, int]]:
        """Per block: ``(stage, dim, dim_out, heads, window, query_stride or 0)``, as
        transformers' ``Sam2MultiScaleBlock`` sets them."""
        settings, total = [], 0
        for stage, count in enumerate(self.blocks_per_stage):
            for index in range(count):
                widening = stage > 0 and index == 0
                dim = self.embed_dim_per_stage[stage - 1 if widening else stage]
                window = self.window_size_per_stage[stage - 1 if widening else stage]
                window = 0 if total in self.global_attention_blocks else window
                pooled = widening and stage <= self.num_query_pool_stages
                settings.append(
                    (
                        stage,
                        dim,
                        self.embed_dim_per_stage[stage],
                        self.num_attention_heads_per_stage[stage],
                        window,
                        self.query_stride if pooled else 0,
                    )
                )
                total += 1
        return settings


def max_pool(op, x, stride: int):
    """Channels-last ``[n, h, w, c]`` max-pooled by ``stride`` (floor), as ``do_pool``."""
    x = op.MaxPool(
        op.Transpose(x, perm=[0, 3, 1, 2]), kernel_shape=[stride] * 2, strides=[stride] * 2
    )
    return op.Transpose(x, perm=[0, 2, 3, 1])


def _padded(side: int, window: int) -> int:
    return side + (-side) % window


def window_partition(op, x, size: tuple[int, int], window: int, channels: int):
    """``[b, h, w, c]`` zero-padded to whole windows: ``[b * windows, window, window, c]``."""
    height, width = size
    pad_h, pad_w = _padded(height, window) - height, _padded(width, window) - width
    if pad_h or pad_w:
        x = op.Pad(x, op.Constant(value_ints=[0, 0, 0, 0, 0, pad_h, pad_w, 0]))
    rows, cols = (height + pad_h) // window, (width + pad_w) // window
    x = op.Reshape(x, op.Constant(value_ints=[-1, rows, window, cols, window, channels]))
    x = op.Transpose(x, perm=[0, 1, 3, 2, 4, 5])
    return op.Reshape(x, op.Constant(value_ints=[-1, window, window, channels]))


def window_unpartition(op, windows, size: tuple[int, int], window: int, channels: int):
    """The inverse of :func:`window_partition`: ``[b, h, w, c]``, the padding cut off."""
    height, width = size
    padded_h, padded_w = _padded(height, window), _padded(width, window)
    shape = [-1, padded_h // window, padded_w // window, window, window, channels]
    x = op.Transpose(op.Reshape(windows, op.Constant(value_ints=shape)), perm=[0, 1, 3, 2, 4, 5])
    x = op.Reshape(x, op.Constant(value_ints=[-1, padded_h, padded_w, channels]))
    zeros, ends = op.Constant(value_ints=[0, 0]), op.Constant(value_ints=[height, width])
    return op.Slice(x, zeros, ends, op.Constant(value_ints=[1, 2]))


class HieraFeedForward(nn.Module):
    """``proj_in``, the activation, ``proj_out`` (transformers' two-layer ``Sam2FeedForward``)."""

    def __init__(self, dim: int, hidden: int, act: str) -> None:
        super().__init__()
        self.proj_in = Linear(dim, hidden, bias=True)
        self.proj_out = Linear(hidden, dim, bias=True)
        self.act = get_activation(act)

    def forward(self, op, x):
        return self.proj_out(op, self.act(op, self.proj_in(op, x)))


class HieraAttention(nn.Module):
    """Attention over ``[n, h, w, dim]`` tokens, the queries max-pooled when ``query_stride``."""

    def __init__(self, dim: int, dim_out: int, heads: int, query_stride: int) -> None:
        super().__init__()
        self.qkv = Linear(dim, 3 * dim_out, bias=True)
        self.proj = Linear(dim_out, dim_out, bias=True)
        self.heads, self.head_dim = heads, dim_out // heads
        self.dim_out, self.query_stride = dim_out, query_stride

    def forward(self, op, x, size: tuple[int, int]):
        """``x [n, h, w, dim]`` (``size`` = (h, w)) to ``[n, h', w', dim_out]``."""
        height, width = size
        qkv = op.Reshape(
            self.qkv(op, x),
            op.Constant(value_ints=[-1, height * width, 3, self.heads, self.head_dim]),
        )
        query, key, value = (op.Gather(qkv, op.Constant(value_int=i), axis=2) for i in range(3))
        if self.query_stride:
            grid = op.Reshape(query, op.Constant(value_ints=[-1, height, width, self.dim_out]))
            height, width = height // self.query_stride, width // self.query_stride
            query = op.Reshape(
                max_pool(op, grid, self.query_stride),
                op.Constant(value_ints=[-1, height * width, self.heads, self.head_dim]),
            )
        query, key, value = (op.Transpose(t, perm=[0, 2, 1, 3]) for t in (query, key, value))
        scores = op.Mul(op.MatMul(query, op.Transpose(key, perm=[0, 1, 3, 2])), self.head_dim**-0.5)
        y = op.Transpose(op.MatMul(op.Softmax(scores, axis=-1), value), perm=[0, 2, 1, 3])
        y = op.Reshape(y, op.Constant(value_ints=[-1, height, width, self.dim_out]))
        return self.proj(op, y)


class HieraBlock(nn.Module):
    """transformers' ``Sam2MultiScaleBlock`` on a grid of static ``size``."""

    def __init__(self, config: HieraConfig, settings: tuple, size: tuple[int, int]) -> None:
        super().__init__()
        _, dim, dim_out, heads, window, stride = settings
        eps = config.layer_norm_eps
        self.layer_norm1 = LayerNorm(dim, eps)
        self.attn = HieraAttention(dim, dim_out, heads, stride)
        self.layer_norm2 = LayerNorm(dim_out, eps)
        self.mlp = HieraFeedForward(dim_out, int(dim_out * config.mlp_ratio), config.hidden_act)
        if dim != dim_out:
            self.proj = Linear(dim, dim_out, bias=True)
        self.dim, self.dim_out, self.window, self.stride, self.size = (
            dim,
            dim_out,
            window,
            stride,
            size,
        )
        if stride and not window:
            raise ConfigError(
                f"{config.model_type}: a global-attention block cannot pool its queries "
                "(transformers' block divides by its window)"
            )
        if stride and window:
            before = [_padded(side, window) // window for side in size]
            after = [
                _padded(side, window // stride) // (window // stride) for side in self.out_size
            ]
            if window // stride < 1 or before != after:
                raise ConfigError(
                    f"{config.model_type}: windows of {window} on a {size} grid do not pool "
                    f"by {stride} into whole windows"
                )

    @property
    def out_size(self) -> tuple[int, int]:
        stride = self.stride or 1
        return self.size[0] // stride, self.size[1] // stride

    def forward(self, op, x):
        residual = x
        x = self.layer_norm1(op, x)
        if self.dim != self.dim_out:
            residual = self.proj(op, x)
            if self.stride:
                residual = max_pool(op, residual, self.stride)
        if self.window:
            x = window_partition(op, x, self.size, self.window, self.dim)
            x = self.attn(op, x, (self.window, self.window))
            window = self.window // (self.stride or 1)
            x = window_unpartition(op, x, self.out_size, window, self.dim_out)
        else:
            x = self.attn(op, x, self.size)
        x = op.Add(residual, x)
        return op.Add(x, self.mlp(op, self.layer_norm2(op, x)))


class HieraPatchEmbeddings(nn.Module):
    def __init__(self, config: HieraConfig) -> None:
        super().__init__()
        self.projection = Conv2d(
            config.num_channels,
            config.hidden_size,
            config.patch_kernel_size,
            stride=config.patch_stride,
            padding=config.patch_padding,
        )

    def forward(self, op, pixel_values):
        """``[b, c, H, W]`` to channels-last patches ``[b, h, w, hidden]``."""
        return op.Transpose(self.projection(op, pixel_values), perm=[0, 2, 3, 1])


class HieraModel(nn.Module):
    """``patch_embed``, ``pos_embed``, ``pos_embed_window`` and ``blocks`` (transformers' keys)."""

    def __init__(self, config: HieraConfig) -> None:
        super().__init__()
        c = config.hidden_size
        self.patch_embed = HieraPatchEmbeddings(config)
        self.pos_embed = nn.Parameter([1, c, *config.background_size])
        window = config.window_size_per_stage[0]
        self.pos_embed_window = nn.Parameter([1, c, window, window])
        blocks, size = [], config.grid
        for settings in config.block_settings():
            blocks.append(HieraBlock(config, settings, size))
            size = blocks[-1].out_size
        self.blocks = nn.ModuleList(blocks)
        ends, total = [], -1
        for count in config.blocks_per_stage:
            total += count
            ends.append(total)
        self.stage_ends = ends
        self.grid, self.window = config.grid, window

    def stage_sizes(self) -> list[tuple[int, int]]:
        """The grid ``(h, w)`` of each stage's output."""
        return [self.blocks[end].out_size for end in self.stage_ends]

    def position_embedding(self, op):
        """``[1, h, w, hidden]``: the background resized as ``F.interpolate(mode="bicubic")``
        (no antialias, half-pixel centres, a = -0.75), plus the tiled window embedding."""
        height, width = self.grid
        sizes = op.Concat(
            op.Shape(self.pos_embed, start=0, end=2),
            op.Constant(value_ints=[height, width]),
            axis=0,
        )
        background = torch_bicubic_resize(op, self.pos_embed, sizes)
        tiles = op.Constant(value_ints=[1, 1, height // self.window, width // self.window])
        return op.Transpose(
            op.Add(background, op.Tile(self.pos_embed_window, tiles)), perm=[0, 2, 3, 1]
        )

    def forward(self, op, pixel_values) -> list:
        """Each stage's output ``[b, h_i, w_i, dim_i]``, high resolution first."""
        x = op.Add(self.patch_embed(op, pixel_values), self.position_embedding(op))
        stages = []
        for index, block in enumerate(self.blocks):
            x = block(op, x)
            if index in self.stage_ends:
                stages.append(x)
        return stages
