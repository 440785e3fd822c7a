"""CvT: stages of a strided conv token embedding (LayerNorm over channels) and transformer
layers whose q/k/v come from depthwise conv + BatchNorm projections of the token map; a class
token joins the stages that ask for it (``cls_token``) and skips the conv projections.

The attention scale is ``embed_dim ** -0.5`` (the whole width, not a head's), as transformers
has it. The module tree follows ``CvtFor*`` checkpoints (``cvt.encoder.stages.0.embedding.
convolution_embeddings.projection``..., ``layernorm``, ``classifier``); a bare ``CvtModel``
checkpoint gets the ``cvt.`` prefix. ``last_hidden_state`` is ``[batch, C, h, w]``; the
classifier reads the LayerNorm of the last stage's class token (transformers' classifier
fails when that stage has none, so that build is refused).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, bidirectional_attention
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig
from mobius_vision.models._conv import (
    BATCHNORM_COUNTERS,
    BatchNorm2d,
    Conv2d,
    ConvNetForImageClassification,
    Sequential,
    activation,
)

STAGE_FIELDS = (
    "patch_sizes",
    "patch_stride",
    "patch_padding",
    "embed_dim",
    "num_heads",
    "depth",
    "mlp_ratio",
    "qkv_bias",
    "cls_token",
    "kernel_qkv",
    "padding_kv",
    "stride_kv",
    "padding_q",
)


@dataclass
class CvtConfig(VisionConfig):
    """Per-stage tuples, one entry per stage (``len(depth)`` stages)."""

    patch_sizes: tuple[int, ...] = (7, 3, 3)
    patch_stride: tuple[int, ...] = (4, 2, 2)
    patch_padding: tuple[int, ...] = (2, 1, 1)
    embed_dim: tuple[int, ...] = (64, 192, 384)
    num_heads: tuple[int, ...] = (1, 3, 6)
    depth: tuple[int, ...] = (1, 2, 10)
    mlp_ratio: tuple[float, ...] = (4.0, 4.0, 4.0)
    qkv_bias: tuple[bool, ...] = (True, True, True)
    cls_token: tuple[bool, ...] = (False, False, True)
    kernel_qkv: tuple[int, ...] = (3, 3, 3)
    padding_kv: tuple[int, ...] = (1, 1, 1)
    stride_kv: tuple[int, ...] = (2, 2, 2)
    padding_q: tuple[int, ...] = (1, 1, 1)

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        stages = len(hf_config.depth)
        methods = set(hf_config.qkv_projection_method[:stages])
        if methods != {"dw_bn"}:
            raise ConfigError(
                f"cvt qkv_projection_method {sorted(methods)} is not supported: only 'dw_bn' "
                "(transformers' own CvT builds no projection for 'avg' and fails on it)"
            )
        if any(s != 1 for s in hf_config.stride_q[:stages]):
            raise ConfigError("cvt stride_q other than 1 is not supported (transformers fails too)")
        values = {n: tuple(getattr(hf_config, n)[:stages]) for n in STAGE_FIELDS}
        dims, last = values["embed_dim"], values["embed_dim"][-1]
        if any(cls and dim != last for cls, dim in zip(values["cls_token"], dims, strict=True)):
            raise ConfigError("cvt: a class token in a stage narrower than the last one")
        return dict(super().hf_fields(hf_config), **values)

    def __post_init__(self) -> None:
        if self.head == "image-classification" and not self.cls_token[-1]:
            raise ConfigError(
                "cvt: image classification needs a class token in the last stage "
                "(transformers' CvtForImageClassification fails without one)"
            )

    def stage_sizes(self) -> list[tuple[int, int]]:
        """The token map ``(h, w)`` of each stage, after its conv embedding."""
        (h, w), sizes = self.image_size, []
        for k, s, p in zip(self.patch_sizes, self.patch_stride, self.patch_padding, strict=True):
            h, w = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
            sizes.append((h, w))
        return sizes


def to_tokens(op, x):
    """``[batch, C, h, w]`` -> ``[batch, h * w, C]``."""
    return op.Transpose(op.Reshape(x, op.Constant(value_ints=[0, 0, -1])), perm=[0, 2, 1])


def to_map(op, x, channels: int, size: tuple[int, int]):
    """``[batch, h * w, C]`` -> ``[batch, C, h, w]``."""
    return op.Reshape(op.Transpose(x, perm=[0, 2, 1]), op.Constant(value_ints=[0, channels, *size]))


class CvtConvEmbeddings(nn.Module):
    """Strided conv, then LayerNorm over the channels: ``[batch, h * w, C]`` tokens."""

    def __init__(self, in_ch: int, dim: int, patch: int, stride: int, padding: int) -> None:
        super().__init__()
        self.projection = Conv2d(in_ch, dim, patch, stride, padding)
        self.normalization = LayerNorm(dim, 1e-5)

    def forward(self, op, x):
        return self.normalization(op, to_tokens(op, self.projection(op, x)))


class CvtEmbeddings(nn.Module):
    def __init__(self, *args) -> None:
        super().__init__()
        self.convolution_embeddings = CvtConvEmbeddings(*args)

    def forward(self, op, x):
        return self.convolution_embeddings(op, x)


class CvtSelfAttentionConvProjection(nn.Module):
    def __init__(self, dim: int, kernel_size: int, padding: int, stride: int) -> None:
        super().__init__()
        self.convolution = Conv2d(dim, dim, kernel_size, stride, padding, groups=dim, bias=False)
        self.normalization = BatchNorm2d(dim)

    def forward(self, op, x):
        return self.normalization(op, self.convolution(op, x))


class CvtSelfAttentionProjection(nn.Module):
    """Depthwise conv + BatchNorm of the token map, flattened back to tokens."""

    def __init__(self, dim: int, kernel_size: int, padding: int, stride: int) -> None:
        super().__init__()
        self.convolution_projection = CvtSelfAttentionConvProjection(
            dim, kernel_size, padding, stride
        )

    def forward(self, op, x):
        return to_tokens(op, self.convolution_projection(op, x))


class CvtSelfAttention(nn.Module):
    def __init__(self, config: CvtConfig, stage: int, size: tuple[int, int]) -> None:
        super().__init__()
        c = config
        d, k = c.embed_dim[stage], c.kernel_qkv[stage]
        self.convolution_projection_query = CvtSelfAttentionProjection(d, k, c.padding_q[stage], 1)
        kv = (d, k, c.padding_kv[stage], c.stride_kv[stage])
        self.convolution_projection_key = CvtSelfAttentionProjection(*kv)
        self.convolution_projection_value = CvtSelfAttentionProjection(*kv)
        bias = c.qkv_bias[stage]
        self.projection_query = Linear(d, d, bias=bias)
        self.projection_key = Linear(d, d, bias=bias)
        self.projection_value = Linear(d, d, bias=bias)
        self.with_cls_token, self.dim, self.size = c.cls_token[stage], d, size
        self.num_heads = c.num_heads[stage]

    def forward(self, op, x):
        if self.with_cls_token:  # the class token skips the conv projections
            tokens = op.Constant(value_ints=[1, self.size[0] * self.size[1]])
            cls, x = op.Split(x, tokens, axis=1, _outputs=2)  # [batch, 1, C], [batch, h * w, C]
        x = to_map(op, x, self.dim, self.size)
        q = self.convolution_projection_query(op, x)  # [batch, h * w, C]
        k = self.convolution_projection_key(op, x)  # [batch, h' * w', C]
        v = self.convolution_projection_value(op, x)
        if self.with_cls_token:
            q, k, v = (op.Concat(cls, t, axis=1) for t in (q, k, v))
        q, k = self.projection_query(op, q), self.projection_key(op, k)
        v = self.projection_value(op, v)
        return bidirectional_attention(op, q, k, v, None, self.num_heads, self.dim**-0.5)


class CvtDense(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.dense = Linear(in_features, out_features, bias=True)

    def forward(self, op, x):
        return self.dense(op, x)


class CvtAttention(nn.Module):
    def __init__(self, config: CvtConfig, stage: int, size: tuple[int, int]) -> None:
        super().__init__()
        self.attention = CvtSelfAttention(config, stage, size)
        self.output = CvtDense(config.embed_dim[stage], config.embed_dim[stage])

    def forward(self, op, x):
        return self.output(op, self.attention(op, x))


class CvtLayer(nn.Module):
    """Pre-norm attention and MLP (exact GELU), each with a residual."""

    def __init__(self, config: CvtConfig, stage: int, size: tuple[int, int]) -> None:
        super().__init__()
        d = config.embed_dim[stage]
        hidden = int(d * config.mlp_ratio[stage])
        self.layernorm_before = LayerNorm(d, 1e-5)
        self.attention = CvtAttention(config, stage, size)
        self.layernorm_after = LayerNorm(d, 1e-5)
        self.intermediate = CvtDense(d, hidden)
        self.act = activation("gelu")
        self.output = CvtDense(hidden, d)

    def forward(self, op, x):
        x = op.Add(x, self.attention(op, self.layernorm_before(op, x)))
        y = self.act(op, self.intermediate(op, self.layernorm_after(op, x)))
        return op.Add(x, self.output(op, y))


class CvtStage(nn.Module):
    """Conv embedding, optional class token first, layers; returns the map and the class token."""

    def __init__(self, config: CvtConfig, stage: int) -> None:
        super().__init__()
        c, size = config, config.stage_sizes()[stage]
        in_ch = c.num_channels if stage == 0 else c.embed_dim[stage - 1]
        # transformers sizes the token by the last stage's width, whichever stage holds it
        self.cls_token = nn.Parameter([1, 1, c.embed_dim[-1]]) if c.cls_token[stage] else None
        patch = (c.patch_sizes[stage], c.patch_stride[stage], c.patch_padding[stage])
        self.embedding = CvtEmbeddings(in_ch, c.embed_dim[stage], *patch)
        self.layers = Sequential([CvtLayer(c, stage, size) for _ in range(c.depth[stage])])
        self.dim, self.size = c.embed_dim[stage], size

    def forward(self, op, x):
        x = self.embedding(op, x)  # [batch, h * w, C]
        if self.cls_token is not None:
            batch = op.Shape(x, start=0, end=1)
            shape = op.Concat(batch, op.Constant(value_ints=[1, self.dim]), axis=0)
            x = op.Concat(op.Expand(self.cls_token, shape), x, axis=1)
        x = self.layers(op, x)
        cls = None
        if self.cls_token is not None:
            tokens = op.Constant(value_ints=[1, self.size[0] * self.size[1]])
            cls, x = op.Split(x, tokens, axis=1, _outputs=2)  # [batch, 1, C], [batch, h * w, C]
        return to_map(op, x, self.dim, self.size), cls


class CvtEncoder(nn.Module):
    def __init__(self, config: CvtConfig) -> None:
        super().__init__()
        self.stages = Sequential([CvtStage(config, i) for i in range(len(config.depth))])

    def forward(self, op, x):
        cls = None
        for stage in self.stages:
            x, cls = stage(op, x)
        return x, cls


class CvtModel(nn.Module):
    def __init__(self, config: CvtConfig) -> None:
        super().__init__()
        self.encoder = CvtEncoder(config)

    def forward(self, op, pixel_values):
        return self.encoder(op, pixel_values)  # [batch, C, h, w], the class token or None


class CvtForImageClassification(ConvNetForImageClassification):
    """The encoder and, with ``--head image-classification``, ``layernorm`` and ``classifier``."""

    config_class = CvtConfig
    model_class = CvtModel
    base_model_prefix = "cvt"
    head_prefixes = ("classifier.", "layernorm.")

    def __init__(self, config: CvtConfig) -> None:
        super().__init__(config)
        classify = self.classifier is not None
        self.layernorm = LayerNorm(config.embed_dim[-1], 1e-5) if classify else None

    def make_classifier(self, config) -> nn.Module:
        return Linear(config.embed_dim[-1], config.num_labels, bias=True)

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        return {
            "last_hidden_state": ["batch", c.embed_dim[-1], *c.stage_sizes()[-1]],
            "logits": ["batch", c.num_labels],
            "cls_token_value": ["batch", 1, c.embed_dim[-1]],
        }

    def forward(self, op, pixel_values):
        hidden, cls = self.base_model(op, pixel_values)
        outputs = {"last_hidden_state": hidden}
        if self.classifier is None and cls is not None:
            outputs["cls_token_value"] = cls  # the bare model's second output
        if self.classifier is not None:
            # the mean over the one class token, as transformers writes it: [batch, C]
            pooled = op.ReduceMean(self.layernorm(op, cls), op.Constant(value_ints=[1]), keepdims=0)
            outputs["logits"] = self.classifier(op, pooled)
        return outputs

    @property
    def ignored(self) -> tuple[str, ...]:
        """BatchNorm counters and, without the head, ``layernorm`` and ``classifier``."""
        head = () if self.classifier is not None else ("classifier.*", "layernorm.*")
        return (BATCHNORM_COUNTERS, *head)


MODEL_TYPES = {"cvt": CvtForImageClassification}
