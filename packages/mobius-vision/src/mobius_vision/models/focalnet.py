"""FocalNet: a patchify stem, stages of focal-modulation blocks, strided patch merging.

Focal modulation replaces attention: a linear projects each token to a query, a context
and ``focal_level + 1`` gates; the context runs through ``focal_level`` depthwise convs of
growing kernels (each level's output gated and summed), plus a gated global mean; a 1x1
conv of that sum multiplies the query. Inputs whose size is not a multiple of a patch
embedding's patch are zero-padded on the bottom/right first, as transformers does.

The module tree follows ``FocalNetFor*`` checkpoints (``focalnet.embeddings.patch_embeddings
.projection``, ``focalnet.encoder.stages.0.layers.0.modulation.focal_layers.1.0``,
``...stages.0.downsample``, ``classifier``); a bare ``FocalNetModel`` checkpoint gets the
``focalnet.`` prefix. ``last_hidden_state`` is ``[batch, tokens, C]``; ``pooler_output``
its token mean, ``[batch, C]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, get_activation
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig, image_size_pair
from mobius_vision.models._conv import (
    Activation,
    Conv2d,
    ConvNetForImageClassification,
    Sequential,
)


@dataclass
class FocalNetConfig(VisionConfig):
    patch_size: int = 4
    embed_dim: int = 96
    depths: tuple[int, ...] = (2, 2, 6, 2)
    focal_levels: tuple[int, ...] = (2, 2, 2, 2)
    focal_windows: tuple[int, ...] = (3, 3, 3, 3)
    hidden_act: str = "gelu"
    mlp_ratio: float = 4.0
    use_conv_embed: bool = False
    use_layerscale: bool = False
    use_post_layernorm: bool = False
    use_post_layernorm_in_modulation: bool = False
    normalize_modulator: bool = False
    layer_norm_eps: float = 1e-5

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        patch_h, patch_w = image_size_pair(hf_config.patch_size)
        if patch_h != patch_w:
            raise ConfigError("focalnet: a non-square patch_size is not supported")
        stages = len(hf_config.depths)
        windows = tuple(hf_config.focal_windows[:stages])
        if any(w % 2 == 0 for w in windows):
            # An even kernel with padding k // 2 grows the map by one; transformers fails too.
            raise ConfigError(f"focalnet: focal_windows {windows} must be odd")
        return dict(
            super().hf_fields(hf_config),
            patch_size=patch_h,
            embed_dim=hf_config.embed_dim,
            depths=tuple(hf_config.depths),
            focal_levels=tuple(hf_config.focal_levels[:stages]),
            focal_windows=windows,
            hidden_act=hf_config.hidden_act,
            mlp_ratio=float(hf_config.mlp_ratio),
            use_conv_embed=bool(hf_config.use_conv_embed),
            use_layerscale=bool(hf_config.use_layerscale),
            use_post_layernorm=bool(hf_config.use_post_layernorm),
            use_post_layernorm_in_modulation=bool(hf_config.use_post_layernorm_in_modulation),
            normalize_modulator=bool(hf_config.normalize_modulator),
            layer_norm_eps=hf_config.layer_norm_eps,
        )

    def stage_dims(self) -> list[int]:
        return [self.embed_dim * 2**i for i in range(len(self.depths))]


class FocalNetPatchEmbeddings(nn.Module):
    """Zero-pad ``[batch, C, h, w]`` to a multiple of ``patch``, conv, flatten to tokens, norm."""

    def __init__(
        self, in_ch, out_ch, patch, use_conv_embed, is_stem, add_norm=False, eps=1e-5
    ) -> None:
        super().__init__()
        if use_conv_embed:  # overlapping convs: 7x7/4 for the stem, 3x3/2 for merging
            self.kernel, self.stride, pad = (7, 4, 2) if is_stem else (3, 2, 1)
        else:
            self.kernel, self.stride, pad = patch, patch, 0
        self.patch, self.pad = patch, pad
        self.projection = Conv2d(in_ch, out_ch, self.kernel, self.stride, pad)
        self.norm = LayerNorm(out_ch, eps) if add_norm else None

    def padded(self, size: int) -> int:
        return math.ceil(size / self.patch) * self.patch

    def out_size(self, height: int, width: int) -> tuple[int, int]:
        k, s, p = self.kernel, self.stride, self.pad
        return tuple((self.padded(n) + 2 * p - k) // s + 1 for n in (height, width))

    def forward(self, op, x, height: int, width: int):
        extra_h, extra_w = self.padded(height) - height, self.padded(width) - width
        if extra_h or extra_w:
            x = op.Pad(x, op.Constant(value_ints=[0, 0, 0, 0, 0, 0, extra_h, extra_w]))
        x = self.projection(op, x)  # [batch, C, h', w']
        x = op.Transpose(op.Reshape(x, op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1])
        return x if self.norm is None else self.norm(op, x)  # [batch, h'w', C]


class FocalNetEmbeddings(nn.Module):
    def __init__(self, config: FocalNetConfig) -> None:
        super().__init__()
        c = config
        self.patch_embeddings = FocalNetPatchEmbeddings(
            c.num_channels, c.embed_dim, c.patch_size, c.use_conv_embed, is_stem=True
        )
        self.norm = LayerNorm(c.embed_dim, c.layer_norm_eps)

    def forward(self, op, pixel_values, height: int, width: int):
        return self.norm(op, self.patch_embeddings(op, pixel_values, height, width))


class FocalNetModulation(nn.Module):
    """Gated hierarchical depthwise context (plus a global mean) modulating a query."""

    def __init__(self, config: FocalNetConfig, dim: int, level: int, window: int) -> None:
        super().__init__()
        self.dim, self.level = dim, level
        self.normalize = config.normalize_modulator
        self.projection_in = Linear(dim, 2 * dim + level + 1, bias=True)
        self.projection_context = Conv2d(dim, dim, 1)
        self.projection_out = Linear(dim, dim, bias=True)
        kernels = [2 * k + window for k in range(level)]  # focal_factor 2
        self.focal_layers = nn.ModuleList(
            [
                Sequential(
                    [
                        Conv2d(dim, dim, k, padding=k // 2, groups=dim, bias=False),
                        Activation("gelu"),
                    ]
                )
                for k in kernels
            ]
        )
        post_norm = config.use_post_layernorm_in_modulation
        self.layernorm = LayerNorm(dim, config.layer_norm_eps) if post_norm else None

    def forward(self, op, x):  # x: [batch, h, w, C]
        x = op.Transpose(self.projection_in(op, x), perm=[0, 3, 1, 2])  # [batch, 2C+L+1, h, w]
        sizes = op.Constant(value_ints=[self.dim, self.dim, self.level + 1])
        q, ctx, gates = op.Split(x, sizes, axis=1, _outputs=3)

        def gate(i: int):  # [batch, 1, h, w]
            start, end, axis = ([v] for v in (i, i + 1, 1))
            return op.Slice(gates, *(op.Constant(value_ints=v) for v in (start, end, axis)))

        ctx_all = None
        for i, focal in enumerate(self.focal_layers):
            ctx = focal(op, ctx)
            gated = op.Mul(ctx, gate(i))
            ctx_all = gated if ctx_all is None else op.Add(ctx_all, gated)
        ctx_global = op.Gelu(op.ReduceMean(ctx, op.Constant(value_ints=[2, 3]), keepdims=1))
        gated = op.Mul(ctx_global, gate(self.level))  # [batch, C, h, w]
        ctx_all = gated if ctx_all is None else op.Add(ctx_all, gated)
        if self.normalize:
            ctx_all = op.Div(ctx_all, op.CastLike(float(self.level + 1), ctx_all))
        x = op.Mul(q, self.projection_context(op, ctx_all))
        x = op.Transpose(x, perm=[0, 2, 3, 1])  # [batch, h, w, C]
        if self.layernorm is not None:
            x = self.layernorm(op, x)
        return self.projection_out(op, x)


class FocalNetMlp(nn.Module):
    def __init__(self, dim: int, hidden: int, act: str) -> None:
        super().__init__()
        self.fc1 = Linear(dim, hidden, bias=True)
        self.act = get_activation(act)
        self.fc2 = Linear(hidden, dim, bias=True)

    def forward(self, op, x):
        return self.fc2(op, self.act(op, self.fc1(op, x)))


class FocalNetLayer(nn.Module):
    """Modulation and MLP residuals; norms before (or, ``use_post_layernorm``, after) each."""

    def __init__(self, config: FocalNetConfig, dim: int, level: int, window: int) -> None:
        super().__init__()
        eps = config.layer_norm_eps
        self.post_norm = config.use_post_layernorm
        self.norm1 = LayerNorm(dim, eps)
        self.modulation = FocalNetModulation(config, dim, level, window)
        self.norm2 = LayerNorm(dim, eps)
        self.mlp = FocalNetMlp(dim, int(dim * config.mlp_ratio), config.hidden_act)
        scaled = config.use_layerscale
        self.gamma_1 = nn.Parameter([dim]) if scaled else None
        self.gamma_2 = nn.Parameter([dim]) if scaled else None

    def scale(self, op, gamma, x):
        return x if gamma is None else op.Mul(x, gamma)

    def forward(self, op, x, height: int, width: int):  # x: [batch, hw, C]
        y = x if self.post_norm else self.norm1(op, x)
        y = op.Reshape(y, op.Constant(value_ints=[0, height, width, -1]))  # [batch, h, w, C]
        y = op.Reshape(self.modulation(op, y), op.Constant(value_ints=[0, height * width, -1]))
        y = self.norm1(op, y) if self.post_norm else y
        x = op.Add(x, self.scale(op, self.gamma_1, y))
        y = self.norm2(op, self.mlp(op, x)) if self.post_norm else self.mlp(op, self.norm2(op, x))
        return op.Add(x, self.scale(op, self.gamma_2, y))


class FocalNetStage(nn.Module):
    def __init__(self, config: FocalNetConfig, index: int) -> None:
        super().__init__()
        dims = config.stage_dims()
        dim, level, window = dims[index], config.focal_levels[index], config.focal_windows[index]
        self.layers = nn.ModuleList(
            [FocalNetLayer(config, dim, level, window) for _ in range(config.depths[index])]
        )
        last = index == len(dims) - 1
        self.downsample = (
            None
            if last
            else FocalNetPatchEmbeddings(
                dim, dims[index + 1], 2, config.use_conv_embed, False, True, config.layer_norm_eps
            )
        )

    def out_size(self, height: int, width: int) -> tuple[int, int]:
        return (
            (height, width) if self.downsample is None else self.downsample.out_size(height, width)
        )

    def forward(self, op, x, height: int, width: int):
        for layer in self.layers:
            x = layer(op, x, height, width)
        if self.downsample is None:
            return x
        x = op.Reshape(
            op.Transpose(x, perm=[0, 2, 1]), op.Constant(value_ints=[0, 0, height, width])
        )
        return self.downsample(op, x, height, width)  # [batch, h'w', 2C]


class FocalNetEncoder(nn.Module):
    def __init__(self, config: FocalNetConfig) -> None:
        super().__init__()
        self.stages = nn.ModuleList([FocalNetStage(config, i) for i in range(len(config.depths))])

    def forward(self, op, x, height: int, width: int):
        for stage in self.stages:
            x = stage(op, x, height, width)
            height, width = stage.out_size(height, width)
        return x


class FocalNetModel(nn.Module):
    def __init__(self, config: FocalNetConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = FocalNetEmbeddings(config)
        self.encoder = FocalNetEncoder(config)
        self.layernorm = LayerNorm(config.stage_dims()[-1], config.layer_norm_eps)

    def grids(self) -> list[tuple[int, int]]:
        """The token grid each stage runs at."""
        grids = [self.embeddings.patch_embeddings.out_size(*self.config.image_size)]
        for stage in list(self.encoder.stages)[:-1]:
            grids.append(stage.out_size(*grids[-1]))
        return grids

    def forward(self, op, pixel_values):
        height, width = self.config.image_size
        x = self.embeddings(op, pixel_values, height, width)  # [batch, tokens, C]
        x = self.layernorm(op, self.encoder(op, x, *self.grids()[0]))
        return x, op.ReduceMean(x, op.Constant(value_ints=[1]), keepdims=0)


class FocalNetForImageClassification(ConvNetForImageClassification):
    config_class = FocalNetConfig
    model_class = FocalNetModel
    base_model_prefix = "focalnet"

    def make_classifier(self, config) -> nn.Module:
        return Linear(config.stage_dims()[-1], config.num_labels, bias=True)

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        h, w = self.base_model.grids()[-1]
        dim = c.stage_dims()[-1]
        return {
            "last_hidden_state": ["batch", h * w, dim],
            "pooler_output": ["batch", dim],
            "logits": ["batch", c.num_labels],
        }

    @property
    def ignored(self) -> tuple[str, ...]:
        """A masked-image-modeling checkpoint's mask token and pixel decoder: no head reads them."""
        return super().ignored + ("focalnet.embeddings.mask_token", "decoder.*")


MODEL_TYPES = {"focalnet": FocalNetForImageClassification}
