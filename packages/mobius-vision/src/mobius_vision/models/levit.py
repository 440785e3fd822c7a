"""LeViT: a 4-conv stem, attention stages with learned relative biases, subsampling attention.

The module tree follows ``LevitFor*`` checkpoints (``levit.patch_embeddings.embedding_layer_1``,
``levit.encoder.stages.0.layers.0.module.queries_keys_values.linear``, ``classifier.linear``);
a bare ``LevitModel`` checkpoint gets the ``levit.`` prefix. Every linear layer is followed by
an eval-mode BatchNorm over its features. ``last_hidden_state`` is ``[batch, tokens, C]``,
``pooler_output`` its token mean; the classifier (BatchNorm and linear) reads the mean, and a
``LevitForImageClassificationWithTeacher`` checkpoint averages it with ``classifier_distill``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components import Linear, merge_heads
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig
from mobius_vision.models._conv import (
    BatchNorm2d,
    Conv2d,
    ConvNetForImageClassification,
    Sequential,
    activation,
)

TEACHER = "LevitForImageClassificationWithTeacher"


@dataclass
class LevitConfig(VisionConfig):
    kernel_size: int = 3
    stride: int = 2
    padding: int = 1
    patch_size: int = 16
    hidden_sizes: tuple[int, ...] = (128, 256, 384)
    num_attention_heads: tuple[int, ...] = (4, 8, 12)
    depths: tuple[int, ...] = (4, 4, 4)
    key_dim: tuple[int, ...] = (16, 16, 16)
    mlp_ratio: tuple[int, ...] = (2, 2, 2)
    attention_ratio: tuple[int, ...] = (2, 2, 2)
    #: Per stage: ``(key_dim, heads, attention_ratio, mlp_ratio, stride)`` of the subsampling
    #: attention that ends it, or ``()`` (transformers' ``down_ops`` without the tag).
    down_ops: tuple[tuple[int, ...], ...] = ()
    teacher: bool = False  # the checkpoint has ``classifier_distill`` (``...WithTeacher``)

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        if not all(isinstance(v, int) for v in (hf_config.image_size, hf_config.patch_size)):
            raise ConfigError("levit: transformers builds LeViT for int image_size and patch_size")
        stages = len(hf_config.depths)
        # LevitEncoder pads down_ops with an empty entry for the last stage.
        ops = [list(o) for o in hf_config.down_ops] + [[""]]
        if len(ops) < stages:
            raise ConfigError(f"levit: {stages} stages but {len(ops) - 1} down_ops")
        down = []
        for i in range(stages):
            if ops[i][:1] != ["Subsample"]:
                down.append(())
            elif i == stages - 1:
                raise ConfigError("levit: a Subsample down_op after the last stage has no output")
            else:
                down.append(tuple(int(v) for v in ops[i][1:6]))
        fields = super().hf_fields(hf_config)
        fields = dict(
            fields,
            kernel_size=hf_config.kernel_size,
            stride=hf_config.stride,
            padding=hf_config.padding,
            patch_size=hf_config.patch_size,
            hidden_sizes=tuple(hf_config.hidden_sizes),
            num_attention_heads=tuple(hf_config.num_attention_heads),
            depths=tuple(hf_config.depths),
            key_dim=tuple(hf_config.key_dim),
            mlp_ratio=tuple(int(r) for r in hf_config.mlp_ratio),
            attention_ratio=tuple(int(r) for r in hf_config.attention_ratio),
            down_ops=tuple(down),
            teacher=TEACHER in fields["architectures"],
        )
        size = hf_config.image_size
        for _ in range(4):  # the stem's four convolutions
            size = (size + 2 * hf_config.padding - hf_config.kernel_size) // hf_config.stride + 1
        if size != hf_config.image_size // hf_config.patch_size:
            raise ConfigError(
                f"levit: the stem makes a {size}x{size} token grid but the attention biases are "
                f"built for image_size // patch_size = {hf_config.image_size // hf_config.patch_size}"
            )
        return fields

    def resolutions(self) -> list[int]:
        """The token grid's side at the start of each stage, and after the last."""
        sizes = [self.image_size[0] // self.patch_size]
        for down in self.down_ops:
            sizes.append((sizes[-1] - 1) // down[4] + 1 if down else sizes[-1])
        return sizes


class LevitConvEmbeddings(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, kernel: int, stride: int, padding: int) -> None:
        super().__init__()
        self.convolution = Conv2d(in_ch, out_ch, kernel, stride, padding, bias=False)
        self.batch_norm = BatchNorm2d(out_ch)

    def forward(self, op, x):
        return self.batch_norm(op, self.convolution(op, x))


class LevitPatchEmbeddings(nn.Module):
    """Four strided conv+BN layers with hardswish between, flattened to ``[batch, tokens, C]``."""

    def __init__(self, config: LevitConfig) -> None:
        super().__init__()
        d, args = config.hidden_sizes[0], (config.kernel_size, config.stride, config.padding)
        self.embedding_layer_1 = LevitConvEmbeddings(config.num_channels, d // 8, *args)
        self.embedding_layer_2 = LevitConvEmbeddings(d // 8, d // 4, *args)
        self.embedding_layer_3 = LevitConvEmbeddings(d // 4, d // 2, *args)
        self.embedding_layer_4 = LevitConvEmbeddings(d // 2, d, *args)
        self.act = activation("hardswish")

    def forward(self, op, pixel_values):
        x = self.act(op, self.embedding_layer_1(op, pixel_values))
        x = self.act(op, self.embedding_layer_2(op, x))
        x = self.act(op, self.embedding_layer_3(op, x))
        x = self.embedding_layer_4(op, x)  # [batch, C, h, w]
        return op.Transpose(op.Reshape(x, op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1])


class MLPLayerWithBN(nn.Module):
    """A bias-free linear layer, then BatchNorm1d over its output features."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = Linear(in_features, out_features)
        self.batch_norm = BatchNorm2d(out_features)
        self.out_features = out_features

    def forward(self, op, x):
        y = self.linear(op, x)  # [batch, tokens, out]
        flat = op.Reshape(y, op.Constant(value_ints=[-1, self.out_features]))
        return op.Reshape(self.batch_norm(op, flat), op.Shape(y))


def bias_indices(res_in: int, res_out: int, stride: int) -> np.ndarray:
    """transformers' ``attention_bias_idxs``: each (query, key) pair's offset, numbered in order."""
    offsets: dict[tuple, int] = {}
    indices = []
    for q in itertools.product(range(res_out), range(res_out)):
        for k in itertools.product(range(res_in), range(res_in)):
            offset = (abs(q[0] * stride - k[0]), abs(q[1] * stride - k[1]))
            indices.append(offsets.setdefault(offset, len(offsets)))
    return np.array(indices, np.int64).reshape(res_out**2, res_in**2)


def biased_attention(op, q, k, v, biases, indices: np.ndarray, scale: float):
    """``softmax(q k^T * scale + biases[:, indices]) v`` on ``[batch, heads, tokens, dim]``."""
    idx = op.Constant(value=ir.tensor(indices))
    bias = op.Gather(biases, idx, axis=1)  # [heads, queries, keys]
    scores = op.Add(op.Mul(op.MatMul(q, op.Transpose(k, perm=[0, 1, 3, 2])), scale), bias)
    out = op.MatMul(op.Softmax(scores, axis=-1), v)  # [batch, heads, queries, dim]
    return merge_heads(op, out)


def split_heads(op, x, heads: int, sizes: list[int]) -> list:
    """``[batch, tokens, heads * sum(sizes)]`` -> one ``[batch, heads, tokens, size]`` per size."""
    x = op.Reshape(x, op.Constant(value_ints=[0, 0, heads, -1]))
    if len(sizes) > 1:
        parts = op.Split(x, op.Constant(value_ints=sizes), axis=3, _outputs=len(sizes))
    else:
        parts = [x]
    return [op.Transpose(p, perm=[0, 2, 1, 3]) for p in parts]


class LevitAttention(nn.Module):
    def __init__(self, dim: int, key_dim: int, heads: int, ratio: int, resolution: int) -> None:
        super().__init__()
        self.sizes = [key_dim, key_dim, ratio * key_dim]
        self.heads, self.scale = heads, key_dim**-0.5
        self.queries_keys_values = MLPLayerWithBN(dim, heads * sum(self.sizes))
        self.act = activation("hardswish")
        self.projection = MLPLayerWithBN(heads * ratio * key_dim, dim)
        self.indices = bias_indices(resolution, resolution, 1)
        self.attention_biases = nn.Parameter([heads, int(self.indices.max()) + 1])

    def forward(self, op, x):
        q, k, v = split_heads(op, self.queries_keys_values(op, x), self.heads, self.sizes)
        y = biased_attention(op, q, k, v, self.attention_biases, self.indices, self.scale)
        return self.projection(op, self.act(op, y))


class LevitAttentionSubsample(nn.Module):
    """Attention whose queries come from every ``stride``-th token: the grid shrinks, C grows."""

    def __init__(self, dim_in, dim_out, key_dim, heads, ratio, stride, res_in, res_out) -> None:
        super().__init__()
        self.sizes = [key_dim, ratio * key_dim]
        self.heads, self.scale, self.key_dim = heads, key_dim**-0.5, key_dim
        self.stride, self.res_in, self.dim_in = stride, res_in, dim_in
        self.keys_values = MLPLayerWithBN(dim_in, heads * sum(self.sizes))
        self.queries = MLPLayerWithBN(dim_in, heads * key_dim)
        self.act = activation("hardswish")
        self.projection = MLPLayerWithBN(heads * ratio * key_dim, dim_out)
        self.indices = bias_indices(res_in, res_out, stride)
        self.attention_biases = nn.Parameter([heads, int(self.indices.max()) + 1])

    def subsample(self, op, x):
        r, s = self.res_in, self.stride
        grid = op.Reshape(x, op.Constant(value_ints=[0, r, r, self.dim_in]))
        grid = op.Slice(grid, [0, 0], [r, r], [1, 2], [s, s])  # [batch, r', r', C]
        return op.Reshape(grid, op.Constant(value_ints=[0, -1, self.dim_in]))

    def forward(self, op, x):
        k, v = split_heads(op, self.keys_values(op, x), self.heads, self.sizes)
        (q,) = split_heads(op, self.queries(op, self.subsample(op, x)), self.heads, [self.key_dim])
        y = biased_attention(op, q, k, v, self.attention_biases, self.indices, self.scale)
        return self.projection(op, self.act(op, y))


class LevitMLPLayer(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.linear_up = MLPLayerWithBN(dim, hidden)
        self.act = activation("hardswish")
        self.linear_down = MLPLayerWithBN(hidden, dim)

    def forward(self, op, x):
        return self.linear_down(op, self.act(op, self.linear_up(op, x)))


class LevitResidualLayer(nn.Module):
    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, op, x):
        return op.Add(x, self.module(op, x))


class LevitStage(nn.Module):
    """``depth`` x (attention, MLP) residual pairs, then the optional subsampling attention + MLP."""

    def __init__(self, config: LevitConfig, i: int, res_in: int, res_out: int) -> None:
        super().__init__()
        dim, kd, heads = config.hidden_sizes[i], config.key_dim[i], config.num_attention_heads[i]
        mlp, ratio = config.mlp_ratio[i], config.attention_ratio[i]
        layers = []
        for _ in range(config.depths[i]):
            layers.append(LevitResidualLayer(LevitAttention(dim, kd, heads, ratio, res_in)))
            if mlp > 0:
                layers.append(LevitResidualLayer(LevitMLPLayer(dim, dim * mlp)))
        if config.down_ops[i]:
            key_dim, down_heads, down_ratio, down_mlp, stride = config.down_ops[i]
            out = config.hidden_sizes[i + 1]
            layers.append(
                LevitAttentionSubsample(
                    dim, out, key_dim, down_heads, down_ratio, stride, res_in, res_out
                )
            )
            if down_mlp > 0:
                layers.append(LevitResidualLayer(LevitMLPLayer(out, out * down_mlp)))
        self.layers = Sequential(layers)

    def forward(self, op, x):
        return self.layers(op, x)


class LevitEncoder(nn.Module):
    def __init__(self, config: LevitConfig) -> None:
        super().__init__()
        res = config.resolutions()
        self.stages = Sequential(
            [LevitStage(config, i, res[i], res[i + 1]) for i in range(len(config.depths))]
        )

    def forward(self, op, x):
        return self.stages(op, x)


class LevitModel(nn.Module):
    def __init__(self, config: LevitConfig) -> None:
        super().__init__()
        self.patch_embeddings = LevitPatchEmbeddings(config)
        self.encoder = LevitEncoder(config)

    def forward(self, op, pixel_values):
        x = self.encoder(op, self.patch_embeddings(op, pixel_values))  # [batch, tokens, C]
        return x, op.ReduceMean(x, op.Constant(value_ints=[1]), keepdims=0)


class LevitClassificationLayer(nn.Module):
    """BatchNorm1d, then a linear layer, on the pooled ``[batch, C]`` features."""

    def __init__(self, dim: int, num_labels: int) -> None:
        super().__init__()
        self.batch_norm = BatchNorm2d(dim)
        self.linear = Linear(dim, num_labels, bias=True)

    def forward(self, op, x):
        return self.linear(op, self.batch_norm(op, x))


class LevitForImageClassification(ConvNetForImageClassification):
    """The classifier on the token mean; with a ``...WithTeacher`` checkpoint, the mean of both heads."""

    config_class = LevitConfig
    model_class = LevitModel
    base_model_prefix = "levit"

    def __init__(self, config: LevitConfig) -> None:
        super().__init__(config)
        teacher = config.teacher and self.classifier is not None
        self.classifier_distill = self.make_classifier(config) if teacher else None

    def make_classifier(self, config) -> nn.Module:
        return LevitClassificationLayer(config.hidden_sizes[-1], config.num_labels)

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        side, dim = c.resolutions()[-1], c.hidden_sizes[-1]
        return {
            "last_hidden_state": ["batch", side * side, dim],
            "pooler_output": ["batch", dim],
            "logits": ["batch", c.num_labels],
        }

    def forward(self, op, pixel_values):
        hidden, pooled = self.base_model(op, pixel_values)
        if self.classifier is None:
            return {"last_hidden_state": hidden, "pooler_output": pooled}
        logits = self.classifier(op, pooled)
        if self.classifier_distill is not None:
            both = op.Add(logits, self.classifier_distill(op, pooled))
            logits = op.Mul(both, op.Constant(value_float=0.5))
        return {"last_hidden_state": hidden, "logits": logits}

    @property
    def ignored(self) -> tuple[str, ...]:
        """BatchNorm counters; the heads this build does not read."""
        ignored = super().ignored
        return ignored + (() if self.classifier_distill is not None else ("classifier_distill.*",))


MODEL_TYPES = {"levit": LevitForImageClassification}
