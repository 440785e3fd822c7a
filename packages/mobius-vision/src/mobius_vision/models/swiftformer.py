"""SwiftFormer: a two-conv stem, stages of conv encoders closed by one efficient additive
attention block, strided conv downsampling between stages.

The additive attention L2-normalises a query and a key per token, pools the queries into one
global query (weighted by a softmax over a size-one axis, so every weight is one, as in
transformers), multiplies it into the keys and projects. The module tree follows
``SwiftFormerFor*`` checkpoints (``swiftformer.patch_embed.patch_embedding.3``,
``swiftformer.encoder.network.0.blocks.1.attn.w_g``, ``...network.1.proj``, ``norm``,
``head``, ``dist_head``); a bare ``SwiftFormerModel`` checkpoint gets the ``swiftformer.``
prefix. ``last_hidden_state`` is ``[batch, C, h, w]``; the logits average the class and the
distillation heads over the BatchNorm-ed spatial mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius.weights import rename_prefixes
from mobius_vision.config import VisionConfig, image_size_pair
from mobius_vision.models._conv import (
    BATCHNORM_COUNTERS,
    Activation,
    BatchNorm2d,
    Conv2d,
    Sequential,
    activation,
)


def _square(name: str, value) -> int:
    first, second = image_size_pair(value)
    if first != second:
        raise ConfigError(f"swiftformer: a non-square {name} {value} is not supported")
    return first


@dataclass
class SwiftFormerConfig(VisionConfig):
    depths: tuple[int, ...] = (3, 3, 6, 4)
    embed_dims: tuple[int, ...] = (48, 56, 112, 220)
    mlp_ratio: float = 4
    downsamples: tuple[bool, ...] = (True, True, True, True)
    hidden_act: str = "gelu"
    down_patch_size: int = 3
    down_stride: int = 2
    down_pad: int = 1
    use_layer_scale: bool = True
    batch_norm_eps: float = 1e-5

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        c = hf_config
        return dict(
            super().hf_fields(hf_config),
            depths=tuple(c.depths),
            embed_dims=tuple(c.embed_dims),
            mlp_ratio=c.mlp_ratio,
            downsamples=tuple(bool(d) for d in c.downsamples),
            hidden_act=c.hidden_act,
            down_patch_size=_square("down_patch_size", c.down_patch_size),
            down_stride=_square("down_stride", c.down_stride),
            down_pad=_square("down_pad", c.down_pad),
            use_layer_scale=bool(c.use_layer_scale),
            batch_norm_eps=c.batch_norm_eps,
        )

    def has_downsample(self, i: int) -> bool:
        """Whether a downsampling embedding follows stage ``i``."""
        last = i == len(self.depths) - 1
        return not last and (self.downsamples[i] or self.embed_dims[i] != self.embed_dims[i + 1])


class SwiftFormerPatchEmbedding(nn.Module):
    """Two stride-2 3x3 convs, each with BatchNorm and ReLU."""

    def __init__(self, config: SwiftFormerConfig) -> None:
        super().__init__()
        half, dim, eps = config.embed_dims[0] // 2, config.embed_dims[0], config.batch_norm_eps
        self.patch_embedding = Sequential(
            [
                Conv2d(config.num_channels, half, 3, 2, 1),
                BatchNorm2d(half, eps),
                Activation("relu"),
                Conv2d(half, dim, 3, 2, 1),
                BatchNorm2d(dim, eps),
                Activation("relu"),
            ]
        )

    def forward(self, op, x):
        return self.patch_embedding(op, x)


class SwiftFormerEmbeddings(nn.Module):
    """The downsampling between stages: a strided conv and BatchNorm."""

    def __init__(self, config: SwiftFormerConfig, in_ch: int, out_ch: int) -> None:
        super().__init__()
        c = config
        self.proj = Conv2d(in_ch, out_ch, c.down_patch_size, c.down_stride, c.down_pad)
        self.norm = BatchNorm2d(out_ch, c.batch_norm_eps)

    def forward(self, op, x):
        return self.norm(op, self.proj(op, x))


class SwiftFormerConvEncoder(nn.Module):
    """``x + layer_scale * pw2(gelu(pw1(bn(dw3x3(x)))))``; also the local representation."""

    def __init__(self, config: SwiftFormerConfig, dim: int, hidden: int) -> None:
        super().__init__()
        self.depth_wise_conv = Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.norm = BatchNorm2d(dim, config.batch_norm_eps)
        self.point_wise_conv1 = Conv2d(dim, hidden, 1)
        self.point_wise_conv2 = Conv2d(hidden, dim, 1)
        self.layer_scale = nn.Parameter([dim, 1, 1])

    def forward(self, op, x):
        y = self.point_wise_conv1(op, self.norm(op, self.depth_wise_conv(op, x)))
        y = self.point_wise_conv2(op, op.Gelu(y))
        return op.Add(x, op.Mul(self.layer_scale, y))


class SwiftFormerMlp(nn.Module):
    def __init__(self, config: SwiftFormerConfig, dim: int) -> None:
        super().__init__()
        hidden = int(dim * config.mlp_ratio)
        self.norm1 = BatchNorm2d(dim, config.batch_norm_eps)
        self.fc1 = Conv2d(dim, hidden, 1)
        self.act = activation(config.hidden_act)
        self.fc2 = Conv2d(hidden, dim, 1)

    def forward(self, op, x):
        return self.fc2(op, self.act(op, self.fc1(op, self.norm1(op, x))))


def _l2_normalize(op, x):
    """``F.normalize(x, dim=-1)``: ``x / max(||x||, 1e-12)``."""
    norm = op.ReduceL2(x, op.Constant(value_ints=[-1]), keepdims=1)
    return op.Div(x, op.Max(norm, op.CastLike(1e-12, x)))


class SwiftFormerEfficientAdditiveAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.to_query = Linear(dim, dim, bias=True)
        self.to_key = Linear(dim, dim, bias=True)
        self.w_g = nn.Parameter([dim, 1])
        self.proj = Linear(dim, dim, bias=True)
        self.final = Linear(dim, dim, bias=True)
        self.scale = dim**-0.5

    def forward(self, op, x):  # x: [batch, tokens, C]
        query = _l2_normalize(op, self.to_query(op, x))
        key = _l2_normalize(op, self.to_key(op, x))
        weight = op.Mul(op.MatMul(query, self.w_g), op.CastLike(self.scale, x))  # [batch, N, 1]
        weight = op.Softmax(weight, axis=-1)  # over the size-one axis, as transformers does
        global_query = op.ReduceSum(
            op.Mul(weight, query), op.Constant(value_ints=[1]), keepdims=1
        )  # [batch, 1, C]
        out = op.Add(self.proj(op, op.Mul(global_query, key)), query)
        return self.final(op, out)


class SwiftFormerEncoderBlock(nn.Module):
    """Local representation, then additive attention and MLP residuals (layer-scaled)."""

    def __init__(self, config: SwiftFormerConfig, dim: int) -> None:
        super().__init__()
        self.local_representation = SwiftFormerConvEncoder(config, dim, dim)
        self.attn = SwiftFormerEfficientAdditiveAttention(dim)
        self.linear = SwiftFormerMlp(config, dim)
        scaled = config.use_layer_scale
        self.layer_scale_1 = nn.Parameter([dim, 1, 1]) if scaled else None
        self.layer_scale_2 = nn.Parameter([dim, 1, 1]) if scaled else None

    def scale(self, op, gamma, x):
        return x if gamma is None else op.Mul(gamma, x)

    def forward(self, op, x):
        x = self.local_representation(op, x)  # [batch, C, h, w]
        tokens = op.Transpose(op.Reshape(x, op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1])
        res = op.Transpose(self.attn(op, tokens), perm=[0, 2, 1])  # [batch, C, hw]
        res = op.Reshape(res, op.Shape(x))  # [batch, C, h, w]
        x = op.Add(x, self.scale(op, self.layer_scale_1, res))
        return op.Add(x, self.scale(op, self.layer_scale_2, self.linear(op, x)))


class SwiftFormerStage(nn.Module):
    """``depth - 1`` conv encoders and one attention block."""

    def __init__(self, config: SwiftFormerConfig, dim: int, depth: int) -> None:
        super().__init__()
        hidden = int(config.mlp_ratio * dim)
        self.blocks = nn.ModuleList(
            [SwiftFormerConvEncoder(config, dim, hidden) for _ in range(depth - 1)]
            + ([SwiftFormerEncoderBlock(config, dim)] if depth else [])
        )

    def forward(self, op, x):
        for block in self.blocks:
            x = block(op, x)
        return x


class SwiftFormerEncoder(nn.Module):
    def __init__(self, config: SwiftFormerConfig) -> None:
        super().__init__()
        dims, network = config.embed_dims, []
        for i, depth in enumerate(config.depths):
            network.append(SwiftFormerStage(config, dims[i], depth))
            if config.has_downsample(i):
                network.append(SwiftFormerEmbeddings(config, dims[i], dims[i + 1]))
        self.network = nn.ModuleList(network)

    def forward(self, op, x):
        for block in self.network:
            x = block(op, x)
        return x


class SwiftFormerModel(nn.Module):
    def __init__(self, config: SwiftFormerConfig) -> None:
        super().__init__()
        self.patch_embed = SwiftFormerPatchEmbedding(config)
        self.encoder = SwiftFormerEncoder(config)

    def forward(self, op, pixel_values):
        return self.encoder(op, self.patch_embed(op, pixel_values))


class SwiftFormerForImageClassification(Model):
    """The backbone and, with ``--head image-classification``, the mean of ``head`` and
    ``dist_head`` on the spatial mean of ``norm(last_hidden_state)``."""

    config_class = SwiftFormerConfig
    task = "image-classification"

    def __init__(self, config: SwiftFormerConfig) -> None:
        super().__init__()
        self.config = config
        self.swiftformer = SwiftFormerModel(config)
        dim, labels = config.embed_dims[-1], config.num_labels
        self.classify = config.head == "image-classification"
        if self.classify:
            self.norm = BatchNorm2d(dim, config.batch_norm_eps)
            self.head = Linear(dim, labels, bias=True)
            self.dist_head = Linear(dim, labels, bias=True)

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        h, w = ((n + 2 - 3) // 2 + 1 for n in c.image_size)  # the stem's two convs
        h, w = ((n + 2 - 3) // 2 + 1 for n in (h, w))
        k, s, p = c.down_patch_size, c.down_stride, c.down_pad
        for i in range(len(c.depths)):
            if c.has_downsample(i):
                h, w = ((n + 2 * p - k) // s + 1 for n in (h, w))
        return {
            "last_hidden_state": ["batch", c.embed_dims[-1], h, w],
            "logits": ["batch", c.num_labels],
        }

    def forward(self, op, pixel_values):
        hidden = self.swiftformer(op, pixel_values)
        outputs = {"last_hidden_state": hidden}
        if self.classify:
            pooled = op.ReduceMean(
                self.norm(op, hidden), op.Constant(value_ints=[2, 3]), keepdims=0
            )
            logits = op.Add(self.head(op, pooled), self.dist_head(op, pooled))
            outputs["logits"] = op.Div(logits, op.CastLike(2.0, logits))
        return outputs

    @property
    def ignored(self) -> tuple[str, ...]:
        """BatchNorm counters and, without the head, the classifier's norm and heads."""
        return (BATCHNORM_COUNTERS,) + (
            () if self.classify else ("norm.*", "head.*", "dist_head.*")
        )

    def sanitize(self, weights: dict) -> dict:
        """A bare ``SwiftFormerModel`` checkpoint gets the ``swiftformer.`` prefix."""
        return rename_prefixes(
            weights, {p: f"swiftformer.{p}" for p in ("patch_embed.", "encoder.")}
        )


MODEL_TYPES = {"swiftformer": SwiftFormerForImageClassification}
