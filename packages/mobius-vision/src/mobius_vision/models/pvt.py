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
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, bidirectional_attention
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig
from mobius_vision.models._conv import Conv2d, ConvNetForImageClassification, activation


@dataclass
class PvtConfig(VisionConfig):
    hidden_sizes: tuple[int, ...] = (64, 128, 320, 512)
    depths: tuple[int, ...] = (2, 2, 2, 2)
    sequence_reduction_ratios: tuple[int, ...] = (8, 4, 2, 1)
    patch_sizes: tuple[int, ...] = (4, 2, 2, 2)
    strides: tuple[int, ...] = (4, 2, 2, 2)
    num_attention_heads: tuple[int, ...] = (1, 2, 5, 8)
    mlp_ratios: tuple[int, ...] = (8, 8, 4, 4)
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-6
    qkv_bias: bool = True

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        n, t = hf_config.num_encoder_blocks, hf_config.model_type
        if n > 1 and not isinstance(hf_config.image_size, int):
            raise ConfigError(f"{t}: transformers sizes later stages from an int image_size only")
        if not all(isinstance(v, int) for v in (*hf_config.patch_sizes, *hf_config.strides)):
            raise ConfigError(f"{t}: only square (int) patch_sizes and strides are supported")
        fields = dict(
            super().hf_fields(hf_config),
            hidden_sizes=tuple(hf_config.hidden_sizes[:n]),
            depths=tuple(hf_config.depths[:n]),
            sequence_reduction_ratios=tuple(hf_config.sequence_reduction_ratios[:n]),
            patch_sizes=tuple(hf_config.patch_sizes[:n]),
            strides=tuple(hf_config.strides[:n]),
            num_attention_heads=tuple(hf_config.num_attention_heads[:n]),
            mlp_ratios=tuple(hf_config.mlp_ratios[:n]),
            hidden_act=hf_config.hidden_act,
            layer_norm_eps=hf_config.layer_norm_eps,
            qkv_bias=bool(hf_config.qkv_bias),
        )
        cls(**fields).check(hf_config.hidden_sizes[-1])
        return fields

    def check(self, final_size: int) -> None:
        """Refuse what transformers cannot run: its reshapes fail on these configs."""
        t = self.model_type
        if final_size != self.hidden_sizes[-1]:
            raise ConfigError(f"{t}: the final norm's hidden_sizes[-1] is not the last stage's")
        for dim, heads in zip(self.hidden_sizes, self.num_attention_heads, strict=True):
            if dim % heads:
                raise ConfigError(f"{t}: hidden size {dim} is not a multiple of {heads} heads")
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
        h, w = self.image_size
        grids = []
        for kernel, step in zip(self.strides, self.patch_sizes, strict=True):
            h, w = (h - kernel) // step + 1, (w - kernel) // step + 1
            grids.append((h, w))
        return grids

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
        x = self.projection(op, x)  # [batch, C, h, w]
        x = op.Transpose(op.Reshape(x, op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1])
        x = self.layer_norm(op, x)  # [batch, tokens, C]
        if self.cls_token is not None:
            shape = op.Concat(op.Shape(x, start=0, end=1), op.Constant(value_ints=[1, 1]), axis=0)
            x = op.Concat(op.Expand(self.cls_token, shape), x, axis=1)
        # The tables match the grid (checked), so transformers' interpolation is the identity.
        return op.Add(x, self.position_embeddings)


def tokens_to_grid(op, x, channels: int, h: int, w: int):
    """``[batch, h*w, C]`` -> ``[batch, C, h, w]``."""
    x = op.Transpose(x, perm=[0, 2, 1])
    return op.Reshape(x, op.Constant(value_ints=[0, channels, h, w]))


def grid_to_tokens(op, x):
    """``[batch, C, h, w]`` -> ``[batch, h*w, C]``."""
    return op.Transpose(op.Reshape(x, op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1])


class PvtEfficientSelfAttention(nn.Module):
    def __init__(self, config: PvtConfig, dim: int, heads: int, ratio: int, grid) -> None:
        super().__init__()
        bias = config.qkv_bias
        self.query, self.key, self.value = (Linear(dim, dim, bias) for _ in range(3))
        self.reduces = ratio > 1
        if self.reduces:
            self.sequence_reduction = Conv2d(dim, dim, ratio, stride=ratio)
            self.layer_norm = LayerNorm(dim, config.layer_norm_eps)
        self.heads, self.scale, self.dim, self.grid = heads, (dim // heads) ** -0.5, dim, grid

    def reduce(self, op, x):
        y = self.sequence_reduction(op, tokens_to_grid(op, x, self.dim, *self.grid))
        return self.layer_norm(op, grid_to_tokens(op, y))  # [batch, tokens / ratio^2, C]

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
    def __init__(self, config: PvtConfig, dim: int, heads: int, ratio: int, grid) -> None:
        super().__init__()
        self.self = PvtEfficientSelfAttention(config, dim, heads, ratio, grid)
        self.output = PvtDense(dim)

    def forward(self, op, x):
        return self.output(op, self.self(op, x))


class PvtFFN(nn.Module):
    def __init__(self, dim: int, hidden: int, act: str) -> None:
        super().__init__()
        self.dense1 = Linear(dim, hidden, bias=True)
        self.act = activation(act)
        self.dense2 = Linear(hidden, dim, bias=True)

    def forward(self, op, x):
        return self.dense2(op, self.act(op, self.dense1(op, x)))


class PvtLayer(nn.Module):
    """Pre-norm attention and MLP, both residual."""

    def __init__(self, config: PvtConfig, i: int, grid) -> None:
        super().__init__()
        dim, eps = config.hidden_sizes[i], config.layer_norm_eps
        heads, ratio = config.num_attention_heads[i], config.sequence_reduction_ratios[i]
        self.layer_norm_1 = LayerNorm(dim, eps)
        self.attention = PvtAttention(config, dim, heads, ratio, grid)
        self.layer_norm_2 = LayerNorm(dim, eps)
        self.mlp = PvtFFN(dim, int(dim * config.mlp_ratios[i]), config.hidden_act)

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


class PvtModel(nn.Module):
    def __init__(self, config: PvtConfig) -> None:
        super().__init__()
        self.encoder = PvtEncoder(config)

    def forward(self, op, pixel_values):
        return self.encoder(op, pixel_values)


class PvtForImageClassification(ConvNetForImageClassification):
    """``last_hidden_state`` and, with the head, the classifier on the class token."""

    config_class = PvtConfig
    model_class = PvtModel
    base_model_prefix = "pvt"

    def make_classifier(self, config) -> nn.Module:
        return Linear(config.hidden_sizes[-1], config.num_labels, bias=True)

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        h, w = c.grids()[-1]
        return {
            "last_hidden_state": ["batch", 1 + h * w, c.hidden_sizes[-1]],
            "logits": ["batch", c.num_labels],
        }

    def forward(self, op, pixel_values):
        hidden = self.base_model(op, pixel_values)
        if self.classifier is None:
            return {"last_hidden_state": hidden}
        cls = op.Gather(hidden, op.Constant(value_int=0), axis=1)  # [batch, C]
        return {"last_hidden_state": hidden, "logits": self.classifier(op, cls)}


MODEL_TYPES = {"pvt": PvtForImageClassification}
