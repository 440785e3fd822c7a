"""BEiT: a ViT with relative position biases, layer scale, no key bias, and mean pooling.

Keys as transformers saves them (``beit.encoder.layer.0.attention.attention.query``,
``...attention.attention.relative_position_bias.relative_position_bias_table``, the
shared ``beit.encoder.relative_position_bias...``, ``lambda_1``/``lambda_2``). The
bias table is gathered by a constant index built for the config's image size; with
``use_mean_pooling`` the pooler is ``layernorm(mean(patch tokens))`` (and the
final layernorm is absent), otherwise the class token. Non-square images with
position tables are refused: transformers resamples the tables there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import LayerNorm, Linear, bidirectional_attention
from mobius.errors import ConfigError
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


class BeitRelativePositionBias(nn.Module):
    """``[1, heads, tokens, tokens]`` from ``relative_position_bias_table [distances, heads]``."""

    def __init__(self, config: BeitConfig) -> None:
        super().__init__()
        wh, ww = config.window
        distances = (2 * wh - 1) * (2 * ww - 1) + 3
        self.relative_position_bias_table = nn.Parameter([distances, config.num_attention_heads])
        self.index = relative_position_index(config.window)

    def forward(self, op):
        index = op.Constant(value=ir.tensor(self.index))
        bias = op.Gather(self.relative_position_bias_table, index, axis=0)  # [t, t, heads]
        return op.Unsqueeze(op.Transpose(bias, perm=[2, 0, 1]), [0])


class BeitSelfAttention(ViTSelfAttention):
    def __init__(self, config: BeitConfig) -> None:
        super().__init__(config)
        self.key = Linear(config.hidden_size, config.hidden_size, bias=False)
        own = config.use_relative_position_bias
        self.relative_position_bias = BeitRelativePositionBias(config) if own else None

    def forward(self, op, x, bias):
        if self.relative_position_bias is not None:
            own = self.relative_position_bias(op)
            bias = own if bias is None else op.Add(bias, own)
        q, k, v = self.query(op, x), self.key(op, x), self.value(op, x)
        return bidirectional_attention(op, q, k, v, bias, self.num_heads, self.scale)


class BeitAttention(ViTAttention):
    def __init__(self, config: BeitConfig) -> None:
        super().__init__(config)
        self.attention = BeitSelfAttention(config)

    def forward(self, op, x, bias):
        return self.output(op, self.attention(op, x, bias))


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

    def forward(self, op, x, bias):
        y = self.attention(op, self.layernorm_before(op, x), bias)
        x = op.Add(x, y if self.lambda_1 is None else op.Mul(y, self.lambda_1))
        y = self.output(op, self.intermediate(op, self.layernorm_after(op, x)))
        return op.Add(x, y if self.lambda_2 is None else op.Mul(y, self.lambda_2))


class BeitEncoder(nn.Module):
    def __init__(self, config: BeitConfig) -> None:
        super().__init__()
        shared = config.use_shared_relative_position_bias
        self.relative_position_bias = BeitRelativePositionBias(config) if shared else None
        self.layer = nn.ModuleList([BeitLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, op, x):
        bias = None if self.relative_position_bias is None else self.relative_position_bias(op)
        for layer in self.layer:
            x = layer(op, x, bias)
        return x


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


class BeitForImageClassification(ViTForImageClassification):
    """The classifier on the pooler's output."""

    config_class = BeitConfig
    base_model_prefix = "beit"
    model_class = BeitModel

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
