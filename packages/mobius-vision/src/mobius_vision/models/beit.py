"""BEiT: a ViT with relative position biases, layer scale, no key bias, and mean pooling.

Keys as transformers saves them (``beit.encoder.layer.0.attention.attention.query``,
``...attention.attention.relative_position_bias.relative_position_bias_table``, the
shared ``beit.encoder.relative_position_bias...``, ``lambda_1``/``lambda_2``). The
bias table is gathered by a constant index built for the config's image size; with
``use_mean_pooling`` the pooler is ``layernorm(mean(patch tokens))`` (and the
final layernorm is absent), otherwise the class token. Non-square images with
position tables are refused: transformers resamples the tables there.

As a dense backbone (:class:`BeitBackbone`, under ZoeDepth and DPT) BEiT takes any image
size: its relative position tables are resampled in the graph to the image's patch grid
and gathered by an index built there, as transformers does for any window size.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, bidirectional_attention
from mobius.errors import ConfigError
from mobius_vision.models._backbone_config import out_features, require_backbone_type, stage_names
from mobius_vision.models.dinov2 import patch_grid
from mobius_vision.models.vit import (
    ViTAttention,
    ViTConfig,
    ViTDense,
    ViTEmbeddings,
    ViTForImageClassification,
    ViTIntermediate,
    ViTPatchEmbeddings,
    ViTSelfAttention,
)


@dataclass
class BeitConfig(ViTConfig):
    use_absolute_position_embeddings: bool = False
    use_relative_position_bias: bool = False
    use_shared_relative_position_bias: bool = False
    layer_scale: bool = True
    use_mean_pooling: bool = True

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        height, width = fields["image_size"]
        tables = (
            hf_config.use_absolute_position_embeddings
            or hf_config.use_relative_position_bias
            or hf_config.use_shared_relative_position_bias
        )
        if tables and height != width:
            raise ConfigError(
                f"{hf_config.model_type}: image_size {height}x{width} is not square; "
                "transformers resamples its position tables there, which mobius does not build"
            )
        return dict(
            fields,
            qkv_bias=True,
            use_absolute_position_embeddings=bool(hf_config.use_absolute_position_embeddings),
            use_relative_position_bias=bool(hf_config.use_relative_position_bias),
            use_shared_relative_position_bias=bool(hf_config.use_shared_relative_position_bias),
            layer_scale=hf_config.layer_scale_init_value > 0,
            use_mean_pooling=bool(hf_config.use_mean_pooling),
        )

    @property
    def window(self) -> tuple[int, int]:
        height, width = self.image_size
        return height // self.patch_size, width // self.patch_size


def relative_position_index(window: tuple[int, int]) -> np.ndarray:
    """``[tokens, tokens]`` rows of the bias table (tokens = 1 + patches), as BEiT numbers them."""
    wh, ww = window
    distances = (2 * wh - 1) * (2 * ww - 1) + 3
    coords = np.stack(np.meshgrid(np.arange(wh), np.arange(ww), indexing="ij")).reshape(2, -1)
    rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0)
    rel[:, :, 0] += wh - 1
    rel[:, :, 1] += ww - 1
    rel[:, :, 0] *= 2 * ww - 1
    index = np.zeros((wh * ww + 1,) * 2, dtype=np.int64)
    index[1:, 1:] = rel.sum(-1)
    index[0, 0:] = distances - 3  # cls to token
    index[0:, 0] = distances - 2  # token to cls
    index[0, 0] = distances - 1  # cls to cls
    return index


def relative_position_index_of(op, grid):
    """:func:`relative_position_index` in the graph, for the int64 ``[2]`` patch ``grid``."""
    height, width = op.Slice(grid, [0], [1], [0]), op.Slice(grid, [1], [2], [0])
    one, two = op.Constant(value_ints=[1]), op.Constant(value_ints=[2])
    count = op.Mul(height, width)
    token = op.Range(op.Constant(value_int=0), op.Squeeze(count, [0]), op.Constant(value_int=1))
    row, col = op.Div(token, width), op.Mod(token, width)
    span = op.Sub(op.Mul(width, two), one)  # 2w - 1
    rows = op.Add(op.Sub(op.Unsqueeze(row, [1]), op.Unsqueeze(row, [0])), op.Sub(height, one))
    cols = op.Add(op.Sub(op.Unsqueeze(col, [1]), op.Unsqueeze(col, [0])), op.Sub(width, one))
    inner = op.Add(op.Mul(rows, span), cols)  # [tokens, tokens] of patches
    distances = op.Add(op.Mul(op.Sub(op.Mul(height, two), one), span), op.Constant(value_ints=[3]))
    to_token = op.Expand(
        op.Sub(distances, op.Constant(value_ints=[3])), op.Concat(one, count, axis=0)
    )
    to_cls = op.Expand(op.Sub(distances, two), op.Concat(count, one, axis=0))
    corner = op.Reshape(op.Sub(distances, one), [1, 1])
    first_column = op.Concat(corner, to_cls, axis=0)  # cls to cls, then token to cls
    return op.Concat(first_column, op.Concat(to_token, inner, axis=0), axis=1)


class BeitRelativePositionBias(nn.Module):
    """``[1, heads, tokens, tokens]`` from ``relative_position_bias_table [distances, heads]``."""

    def __init__(self, config: BeitConfig) -> None:
        super().__init__()
        wh, ww = config.window
        distances = (2 * wh - 1) * (2 * ww - 1) + 3
        self.relative_position_bias_table = nn.Parameter([distances, config.num_attention_heads])
        self.index = relative_position_index(config.window)
        self.window, self.heads = config.window, config.num_attention_heads

    def forward(self, op, grid=None):
        """The bias for the config's window; with ``grid`` (int64 ``[2]``, the image's patch
        grid) for any window: the table resampled to it as transformers does (MiDaS v3.1)."""
        if grid is None:
            table = self.relative_position_bias_table
            index = op.Constant(value=ir.tensor(self.index))
        else:
            table, index = self.resampled_table(op, grid), relative_position_index_of(op, grid)
        bias = op.Gather(table, index, axis=0)  # [t, t, heads]
        return op.Unsqueeze(op.Transpose(bias, perm=[2, 0, 1]), [0])

    def resampled_table(self, op, grid):
        """The distance rows bilinearly resized (``align_corners=False``) from the config's
        ``(2w - 1)^2`` grid to ``(2h - 1) x (2w - 1)`` of ``grid``; the 3 class rows kept."""
        table, side = self.relative_position_bias_table, 2 * self.window[0] - 1  # square
        rows = op.Slice(table, [0], [side * side], [0])
        rows = op.Transpose(op.Reshape(rows, [1, side, side, -1]), perm=[0, 3, 1, 2])
        two = op.Constant(value_ints=[2])
        spans = op.Sub(op.Mul(grid, two), op.Constant(value_ints=[1]))
        sizes = op.Concat(op.Shape(rows, start=0, end=2), spans, axis=0)
        rows = op.Resize(
            rows, None, None, sizes, mode="linear", coordinate_transformation_mode="half_pixel"
        )
        rows = op.Reshape(op.Transpose(rows, perm=[0, 2, 3, 1]), [-1, self.heads])
        return op.Concat(rows, op.Slice(table, [side * side], [2**62], [0]), axis=0)


class BeitSelfAttention(ViTSelfAttention):
    def __init__(self, config: BeitConfig) -> None:
        super().__init__(config)
        self.key = Linear(config.hidden_size, config.hidden_size, bias=False)
        own = config.use_relative_position_bias
        self.relative_position_bias = BeitRelativePositionBias(config) if own else None

    def forward(self, op, x, bias, grid=None):
        if self.relative_position_bias is not None:
            own = self.relative_position_bias(op, grid)
            bias = own if bias is None else op.Add(bias, own)
        q, k, v = self.query(op, x), self.key(op, x), self.value(op, x)
        return bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)


class BeitAttention(ViTAttention):
    def __init__(self, config: BeitConfig) -> None:
        super().__init__(config)
        self.attention = BeitSelfAttention(config)

    def forward(self, op, x, bias, grid=None):
        return self.output(op, self.attention(op, x, bias, grid))


class BeitLayer(nn.Module):
    def __init__(self, config: BeitConfig) -> None:
        super().__init__()
        d, eps = config.hidden_size, config.layer_norm_eps
        self.attention = BeitAttention(config)
        self.layernorm_before = LayerNorm(d, eps)
        self.layernorm_after = LayerNorm(d, eps)
        self.intermediate = ViTIntermediate(config)
        self.output = ViTDense(config.intermediate_size, d)
        self.lambda_1 = nn.Parameter([d]) if config.layer_scale else None
        self.lambda_2 = nn.Parameter([d]) if config.layer_scale else None

    def forward(self, op, x, bias, grid=None):
        """``grid``: the patch grid of an image of any size (None: the config's)."""
        y = self.attention(op, self.layernorm_before(op, x), bias, grid)
        x = op.Add(x, y if self.lambda_1 is None else op.Mul(y, self.lambda_1))
        y = self.output(op, self.intermediate(op, self.layernorm_after(op, x)))
        return op.Add(x, y if self.lambda_2 is None else op.Mul(y, self.lambda_2))


class BeitEncoder(nn.Module):
    def __init__(self, config: BeitConfig) -> None:
        super().__init__()
        shared = config.use_shared_relative_position_bias
        self.relative_position_bias = BeitRelativePositionBias(config) if shared else None
        self.layer = nn.ModuleList([BeitLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, op, x, grid=None):
        return self.hidden_states(op, x, grid)[-1]

    def hidden_states(self, op, x, grid=None) -> list:
        """The input, then every layer's output; ``grid``: as :meth:`BeitLayer.forward`'s."""
        shared = self.relative_position_bias
        bias = None if shared is None else shared(op, grid)
        outputs = [x]
        for layer in self.layer:
            outputs.append(layer(op, outputs[-1], bias, grid))
        return outputs


class BeitLayersEncoder(BeitEncoder):
    """The encoder returning its hidden states: its input, then every layer's output."""

    def forward(self, op, x, grid=None) -> list:
        return self.hidden_states(op, x, grid)


class BeitEmbeddings(ViTEmbeddings):
    """``[cls, patches]`` (``+ position_embeddings`` with absolute positions)."""

    def __init__(self, config: BeitConfig) -> None:
        nn.Module.__init__(self)  # ViT's position table is optional here
        self.cls_token = nn.Parameter([1, 1, config.hidden_size])
        self.patch_embeddings = ViTPatchEmbeddings(config)
        tokens = config.num_patches + 1
        absolute = config.use_absolute_position_embeddings
        self.position_embeddings = (
            nn.Parameter([1, tokens, config.hidden_size]) if absolute else None
        )

    def forward(self, op, pixel_values):
        if self.position_embeddings is not None:
            return super().forward(op, pixel_values)
        patches = self.patch_embeddings(op, pixel_values)
        batch = op.Shape(pixel_values, start=0, end=1)
        cls = op.Expand(self.cls_token, op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0))
        return op.Concat(cls, patches, axis=1)


class BeitPooler(nn.Module):
    """``layernorm(mean(patch tokens))``, or the class token without mean pooling."""

    def __init__(self, config: BeitConfig) -> None:
        super().__init__()
        mean = config.use_mean_pooling
        self.layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps) if mean else None

    def forward(self, op, x):
        if self.layernorm is None:
            return op.Gather(x, op.Constant(value_int=0), axis=1)
        patches = op.Slice(x, [1], [2**62], [1])
        return self.layernorm(op, op.ReduceMean(patches, op.Constant(value_ints=[1]), keepdims=0))


class BeitModel(nn.Module):
    bare_pooler = True  # BeitModel() has the pooler; Data2VecVisionModel() does not

    def __init__(self, config: BeitConfig) -> None:
        super().__init__()
        self.embeddings = BeitEmbeddings(config)
        self.encoder = BeitEncoder(config)
        mean = config.use_mean_pooling
        self.layernorm = None if mean else LayerNorm(config.hidden_size, config.layer_norm_eps)
        classify = config.head == "image-classification"
        self.pooler = BeitPooler(config) if classify or self.bare_pooler else None
        self.pools = not classify and self.pooler is not None

    def forward(self, op, pixel_values):
        x = self.encoder(op, self.embeddings(op, pixel_values))
        if self.layernorm is not None:
            x = self.layernorm(op, x)
        return x, self.pooler(op, x) if self.pooler is not None else None


@dataclass
class BeitBackboneConfig(BeitConfig):
    """BEiT as a backbone: which hidden states it returns (0 is the embeddings), and how."""

    out_features: tuple[str, ...] = ()
    reshape_hidden_states: bool = True

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        # Data2Vec-Vision's classifier inherits this class's backbone_class: BEiT's alone.
        require_backbone_type(hf_config, "beit")
        head = hf_config.model_type
        if getattr(hf_config, "add_fpn", False):
            raise ConfigError(f"{head} backbone: add_fpn (its 4-scale FPN) is not built yet")
        if hf_config.use_shared_relative_position_bias:
            raise ConfigError(
                f"{head} backbone: a shared relative position bias is not built under dense "
                "heads (transformers saves it outside the backbone's encoder)"
            )
        if hf_config.use_absolute_position_embeddings:
            raise ConfigError(
                f"{head} backbone: absolute position embeddings (interpolated to each image "
                "size) are not built yet"
            )
        fields = super().hf_fields(hf_config)
        chosen = out_features(hf_config, fields["num_hidden_layers"])
        return dict(
            fields,
            out_features=chosen,
            reshape_hidden_states=bool(getattr(hf_config, "reshape_hidden_states", True)),
        )

    @property
    def out_indices(self) -> tuple[int, ...]:
        """The hidden states returned: 0 the embeddings, ``i`` the output of layer ``i``."""
        names = stage_names(self.num_hidden_layers)
        return tuple(names.index(name) for name in self.out_features)


class BeitBackbone(nn.Module):
    """transformers' ``BeitBackbone``: ``feature_maps``, one per ``out_features`` entry, at any
    image size (the relative position tables resampled to its patch grid).

    Each is a hidden state as ``[batch, 1 + patches, hidden]`` tokens, or with
    ``reshape_hidden_states`` the patches as a ``[batch, hidden, rows, cols]`` map. The layers
    past the last one read are not built.
    """

    config_class = BeitBackboneConfig

    def __init__(self, config: BeitBackboneConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BeitEmbeddings(config)
        read = dataclasses.replace(config, num_hidden_layers=max(config.out_indices))
        self.encoder = BeitLayersEncoder(read)

    @property
    def ignored(self) -> tuple[str, ...]:
        """Checkpoint tensors the graph does not read (relative names): the mask token, the
        final norm (saved as ``beit.layernorm``), the layers past the last one read."""
        unread = range(max(self.config.out_indices), self.config.num_hidden_layers)
        return (
            "embeddings.mask_token",
            "beit.layernorm.*",
            *(f"encoder.layer.{i}.*" for i in unread),
        )

    #: The name the depth heads (DPT, Depth Anything) read the same list under.
    unused = ignored

    def forward(self, op, pixel_values) -> list:
        config = self.config
        grid = patch_grid(op, pixel_values, config.patch_size)
        hidden_states = self.encoder(op, self.embeddings(op, pixel_values), grid)
        maps = []
        for index in config.out_indices:
            x = hidden_states[index]
            if config.reshape_hidden_states:
                x = op.Transpose(op.Slice(x, [1], [2**62], [1]), perm=[0, 2, 1])
                x = op.Reshape(x, op.Concat(op.Shape(x, start=0, end=2), grid, axis=0))
            maps.append(x)
        return maps


class BeitForImageClassification(ViTForImageClassification):
    """The classifier on the pooler's output."""

    config_class = BeitConfig
    base_model_prefix = "beit"
    model_class = BeitModel
    #: What a dense head (ZoeDepth, DPT) puts under itself (:mod:`._backbone`).
    backbone_class = BeitBackbone

    def forward(self, op, pixel_values):
        hidden, pooled = self.base_model(op, pixel_values)
        outputs = {"last_hidden_state": hidden}
        if self.base_model.pools:
            outputs["pooler_output"] = pooled
        if self.classifier is not None:
            outputs["logits"] = self.classifier(op, pooled)
        return outputs

    @property
    def ignored(self) -> tuple[str, ...]:
        ignored = [f"{self.base_model_prefix}.embeddings.mask_token", "lm_head.*"]
        if self.base_model.pooler is None:
            ignored.append(f"{self.base_model_prefix}.pooler.*")
        if self.classifier is None:
            ignored.append("classifier.*")
        return tuple(ignored)


MODEL_TYPES = {"beit": BeitForImageClassification}
