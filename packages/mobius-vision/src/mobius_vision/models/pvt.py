"""PVT: stages of patch embedding plus transformer layers with spatial-reduction attention.

The module tree follows ``PvtFor*`` checkpoints (``pvt.encoder.patch_embeddings.0.projection``,
``pvt.encoder.block.0.0.attention.self.sequence_reduction``, ``classifier``); a bare
``PvtModel`` checkpoint gets the ``pvt.`` prefix. Keys and values of a stage with
``sequence_reduction_ratio > 1`` come from a strided conv of its token grid, then a LayerNorm.
The last stage prepends a class token; ``last_hidden_state`` is ``[batch, 1 + tokens, C]``
(no pooler) and the classifier reads the class token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from onnxscript import nn

from mobius.components import LayerNorm, Linear, bidirectional_attention
from mobius.errors import ConfigError
from mobius_vision.models._conv import Conv2d, activation
from mobius_vision.models._pyramid import (
    PyramidConfig,
    PyramidForImageClassification,
    PyramidModel,
    conv_grids,
    grid_to_tokens,
    tokens_to_grid,
)


def check_heads(model_type: str, hidden_sizes, num_attention_heads) -> None:
    """Refuse a stage whose width does not split into its heads."""
    for dim, heads in zip(hidden_sizes, num_attention_heads, strict=True):
        if dim % heads:
            raise ConfigError(f"{model_type}: hidden size {dim} is not a multiple of {heads} heads")


@dataclass
class PvtConfig(PyramidConfig):
    hidden_sizes: tuple[int, ...] = (64, 128, 320, 512)
    depths: tuple[int, ...] = (2, 2, 2, 2)
    sequence_reduction_ratios: tuple[int, ...] = (8, 4, 2, 1)
    patch_sizes: tuple[int, ...] = (4, 2, 2, 2)
    strides: tuple[int, ...] = (4, 2, 2, 2)
    num_attention_heads: tuple[int, ...] = (1, 2, 5, 8)
    mlp_ratios: tuple[int, ...] = (8, 8, 4, 4)
    layer_norm_eps: float = 1e-6
    qkv_bias: bool = True

    square_lists: ClassVar[tuple[str, ...]] = ("patch_sizes", "strides")

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if hf_config.num_encoder_blocks > 1 and not isinstance(hf_config.image_size, int):
            t = hf_config.model_type
            raise ConfigError(f"{t}: transformers sizes later stages from an int image_size only")
        return super().hf_fields(hf_config)

    def check(self) -> None:
        """Refuse what transformers cannot run: its reshapes fail on these configs."""
        t = self.model_type
        check_heads(t, self.hidden_sizes, self.num_attention_heads)
        if self.sequence_reduction_ratios[-1] > 1:
            raise ConfigError(f"{t}: the last stage's class token admits no sequence reduction")
        for i, ((h, w), count) in enumerate(zip(self.grids(), self.table_sizes(), strict=True)):
            if h * w != count:
                raise ConfigError(
                    f"{t}: stage {i} makes a {h}x{w} token grid but its position embeddings "
                    f"hold {count} (transformers fails to reshape them too)"
                )

    def grids(self) -> list[tuple[int, int]]:
        """Each stage's token grid: a conv of kernel ``strides[i]`` and stride ``patch_sizes[i]``."""
        return conv_grids(self.image_size, self.strides, self.patch_sizes, [0] * len(self.strides))

    def table_sizes(self) -> list[int]:
        """The patches each stage's position table holds, as transformers sizes them."""
        height, width = self.image_size
        sizes = []
        for i, p in enumerate(self.patch_sizes):
            h, w = (height, width) if i == 0 else (height // 2 ** (i + 1), width // 2 ** (i + 1))
            sizes.append((h // p) * (w // p))
        return sizes


class PvtPatchEmbeddings(nn.Module):
    """Conv, flatten, LayerNorm, the optional class token in front, plus the position table."""

    def __init__(self, config: PvtConfig, i: int, cls_token: bool) -> None:
        super().__init__()
        in_ch = config.num_channels if i == 0 else config.hidden_sizes[i - 1]
        dim, tokens = config.hidden_sizes[i], config.table_sizes()[i] + int(cls_token)
        self.position_embeddings = nn.Parameter([1, tokens, dim])
        self.cls_token = nn.Parameter([1, 1, dim]) if cls_token else None
        self.projection = Conv2d(in_ch, dim, config.strides[i], stride=config.patch_sizes[i])
        self.layer_norm = LayerNorm(dim, config.layer_norm_eps)

    def forward(self, op, x):
        x = self.layer_norm(op, grid_to_tokens(op, self.projection(op, x)))  # [batch, tokens, C]
        if self.cls_token is not None:
            shape = op.Concat(op.Shape(x, start=0, end=1), op.Constant(value_ints=[1, 1]), axis=0)
            x = op.Concat(op.Expand(self.cls_token, shape), x, axis=1)
        # The tables match the grid (checked), so transformers' interpolation is the identity.
        return op.Add(x, self.position_embeddings)


class PvtEfficientSelfAttention(nn.Module):
    """Attention whose keys and values come from the grid reduced by a strided conv and LayerNorm.

    ``kernel`` is the reducing conv's kernel and stride; ``None`` attends to the tokens as they are.
    """

    reduction_name = "sequence_reduction"  # the checkpoint's name for the reducing conv

    def __init__(self, config, dim: int, heads: int, kernel: int | None, grid) -> None:
        super().__init__()
        bias = config.qkv_bias
        self.query, self.key, self.value = (Linear(dim, dim, bias) for _ in range(3))
        self.reduces = kernel is not None
        if self.reduces:
            setattr(self, self.reduction_name, Conv2d(dim, dim, kernel, stride=kernel))
            self.layer_norm = LayerNorm(dim, config.layer_norm_eps)
        self.heads, self.scale, self.dim, self.grid = heads, (dim // heads) ** -0.5, dim, grid

    def reduce(self, op, x):
        conv = getattr(self, self.reduction_name)
        y = conv(op, tokens_to_grid(op, x, self.dim, *self.grid))
        return self.layer_norm(op, grid_to_tokens(op, y))  # [batch, reduced tokens, C]

    def forward(self, op, x):
        kv = self.reduce(op, x) if self.reduces else x
        q, k, v = self.query(op, x), self.key(op, kv), self.value(op, kv)
        return bidirectional_attention(op, q, k, v, None, self.heads, self.scale)


class PvtDense(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dense = Linear(dim, dim, bias=True)

    def forward(self, op, x):
        return self.dense(op, x)


class PvtAttention(nn.Module):
    def __init__(self, config: PvtConfig, i: int, grid) -> None:
        super().__init__()
        dim, ratio = config.hidden_sizes[i], config.sequence_reduction_ratios[i]
        kernel = ratio if ratio > 1 else None
        heads = config.num_attention_heads[i]
        self.self = PvtEfficientSelfAttention(config, dim, heads, kernel, grid)
        self.output = PvtDense(dim)

    def forward(self, op, x):
        return self.output(op, self.self(op, x))


class PvtFFN(nn.Module):
    def __init__(self, config, i: int, grid) -> None:
        super().__init__()
        dim = config.hidden_sizes[i]
        hidden = int(dim * config.mlp_ratios[i])
        self.dense1 = Linear(dim, hidden, bias=True)
        self.act = activation(config.hidden_act)
        self.dense2 = Linear(hidden, dim, bias=True)

    def mix_tokens(self, op, x):
        """What mixes neighbouring tokens between the two layers: nothing in PVT."""
        return x

    def forward(self, op, x):
        return self.dense2(op, self.act(op, self.mix_tokens(op, self.dense1(op, x))))


class PvtLayer(nn.Module):
    """Pre-norm attention and MLP, both residual."""

    attention_class = PvtAttention
    mlp_class = PvtFFN

    def __init__(self, config, i: int, grid) -> None:
        super().__init__()
        dim, eps = config.hidden_sizes[i], config.layer_norm_eps
        self.layer_norm_1 = LayerNorm(dim, eps)
        self.attention = self.attention_class(config, i, grid)
        self.layer_norm_2 = LayerNorm(dim, eps)
        self.mlp = self.mlp_class(config, i, grid)

    def forward(self, op, x):
        x = op.Add(x, self.attention(op, self.layer_norm_1(op, x)))
        return op.Add(x, self.mlp(op, self.layer_norm_2(op, x)))


class PvtEncoder(nn.Module):
    def __init__(self, config: PvtConfig) -> None:
        super().__init__()
        n, grids = len(config.depths), config.grids()
        self.patch_embeddings = nn.ModuleList(
            [PvtPatchEmbeddings(config, i, cls_token=i == n - 1) for i in range(n)]
        )
        self.block = nn.ModuleList(
            [
                nn.ModuleList([PvtLayer(config, i, grids[i]) for _ in range(depth)])
                for i, depth in enumerate(config.depths)
            ]
        )
        self.layer_norm = LayerNorm(config.hidden_sizes[-1], config.layer_norm_eps)
        self.grids, self.hidden_sizes = grids, config.hidden_sizes

    def forward(self, op, x):
        for i, (embeddings, layers) in enumerate(
            zip(self.patch_embeddings, self.block, strict=True)
        ):
            x = embeddings(op, x)  # [batch, tokens, C]
            for layer in layers:
                x = layer(op, x)
            if i < len(self.grids) - 1:
                x = tokens_to_grid(op, x, self.hidden_sizes[i], *self.grids[i])
        return self.layer_norm(op, x)


class PvtModel(PyramidModel):
    encoder_class = PvtEncoder


class PvtForImageClassification(PyramidForImageClassification):
    """``last_hidden_state`` ``[batch, 1 + tokens, C]``; the classifier reads the class token."""

    config_class = PvtConfig
    model_class = PvtModel
    base_model_prefix = "pvt"

    def hidden_shape(self) -> list[int]:
        h, w = self.config.grids()[-1]
        return [1 + h * w, self.config.hidden_sizes[-1]]

    def pool(self, op, hidden):
        return op.Gather(hidden, op.Constant(value_int=0), axis=1)  # [batch, C]


MODEL_TYPES = {"pvt": PvtForImageClassification}
