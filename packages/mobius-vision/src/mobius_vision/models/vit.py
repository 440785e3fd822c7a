"""ViT: patches from a strided Conv, a class token, learned positions, pre-norm encoder layers.

The module tree follows ``ViTFor*`` checkpoints as transformers saves them
(``vit.encoder.layer.0.attention.attention.query``..., ``classifier``); a bare
``ViTModel`` checkpoint gets the ``vit.`` prefix added, and only it has a
``pooler`` (dense and tanh on the class token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, bidirectional_attention, get_activation
from mobius.model import Model
from mobius_vision.config import VisionConfig
from mobius_vision.models._common import prefix_bare_names


@dataclass
class ViTConfig(VisionConfig):
    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    patch_size: int = 16
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-12
    qkv_bias: bool = True
    pooler: bool = False  # the bare model's checkpoint carries ``pooler.dense``
    pooler_act: str = "tanh"
    pooler_output_size: int = 0  # 0: hidden_size

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        bare = not fields["architectures"] or any(
            a.endswith("Model") for a in fields["architectures"]
        )
        return dict(
            fields,
            hidden_size=hf_config.hidden_size,
            intermediate_size=hf_config.intermediate_size,
            num_hidden_layers=hf_config.num_hidden_layers,
            num_attention_heads=hf_config.num_attention_heads,
            patch_size=hf_config.patch_size,
            hidden_act=hf_config.hidden_act,
            layer_norm_eps=hf_config.layer_norm_eps,
            qkv_bias=bool(getattr(hf_config, "qkv_bias", True)),
            pooler=bare,
            pooler_act=getattr(hf_config, "pooler_act", "tanh"),
            pooler_output_size=getattr(hf_config, "pooler_output_size", None) or 0,
        )

    @property
    def pooled_size(self) -> int:
        """The pooler's width (``pooler_output_size``; 0 means ``hidden_size``)."""
        return self.pooler_output_size or self.hidden_size

    @property
    def num_patches(self) -> int:
        height, width = self.image_size
        return (height // self.patch_size) * (width // self.patch_size)


class ViTPatchEmbeddings(nn.Module):
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.projection = PatchConv(config.num_channels, config.hidden_size, config.patch_size)

    def forward(self, op, pixel_values):
        return self.projection(op, pixel_values)  # [batch, patches, hidden]


class PatchConv(nn.Module):
    """``Conv2d(kernel=stride=patch)`` flattened to ``[batch, patches, hidden]``."""

    def __init__(self, in_channels: int, out_channels: int, patch: int, bias: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter([out_channels, in_channels, patch, patch])
        self.bias = nn.Parameter([out_channels]) if bias else None
        self.patch = patch

    def forward(self, op, pixel_values):
        p = self.patch
        x = op.Conv(pixel_values, self.weight, self.bias, kernel_shape=[p, p], strides=[p, p])
        # Sizes from the shape, not -1: a batch of no images (a VL decode step) stays valid.
        patches = op.ReduceProd(op.Shape(x, start=2), keepdims=1)
        x = op.Reshape(
            x, op.Concat(op.Shape(x, start=0, end=2), patches, axis=0)
        )  # [batch, hidden, patches]
        return op.Transpose(x, perm=[0, 2, 1])


class ViTEmbeddings(nn.Module):
    """``[cls, patches] + position_embeddings``."""

    extra_tokens = 1  # the class token (DeiT adds a distillation token)

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.cls_token = nn.Parameter([1, 1, config.hidden_size])
        self.patch_embeddings = ViTPatchEmbeddings(config)
        tokens = config.num_patches + self.extra_tokens
        self.position_embeddings = nn.Parameter([1, tokens, config.hidden_size])

    def prefix_tokens(self) -> list:
        return [self.cls_token]

    def forward(self, op, pixel_values):
        patches = self.patch_embeddings(op, pixel_values)  # [batch, patches, hidden]
        batch = op.Shape(pixel_values, start=0, end=1)
        shape = op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0)  # [batch, 1, 1]
        prefix = [op.Expand(token, shape) for token in self.prefix_tokens()]  # [batch, 1, hidden]
        x = op.Concat(*prefix, patches, axis=1)  # [batch, tokens, hidden]
        return op.Add(x, self.position_embeddings)


class ViTSelfAttention(nn.Module):
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.query = Linear(d, d, bias=config.qkv_bias)
        self.key = Linear(d, d, bias=config.qkv_bias)
        self.value = Linear(d, d, bias=config.qkv_bias)
        self.num_heads = config.num_attention_heads
        self.scale = (d // self.num_heads) ** -0.5

    def forward(self, op, x):
        q, k, v = self.query(op, x), self.key(op, x), self.value(op, x)
        return bidirectional_attention(op, q, k, v, None, self.num_heads, self.scale)


class ViTDense(nn.Module):
    """``dense(x)``: the ``attention.output`` and ``output`` projections."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.dense = Linear(in_features, out_features, bias=True)

    def forward(self, op, x):
        return self.dense(op, x)


class ViTAttention(nn.Module):
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.attention = ViTSelfAttention(config)
        self.output = ViTDense(config.hidden_size, config.hidden_size)

    def forward(self, op, x):
        return self.output(op, self.attention(op, x))


class ViTIntermediate(ViTDense):
    def __init__(self, config: ViTConfig) -> None:
        super().__init__(config.hidden_size, config.intermediate_size)
        self.act = get_activation(config.hidden_act)

    def forward(self, op, x):
        return self.act(op, self.dense(op, x))


class ViTLayer(nn.Module):
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        d, eps = config.hidden_size, config.layer_norm_eps
        self.layernorm_before = LayerNorm(d, eps)
        self.attention = ViTAttention(config)
        self.layernorm_after = LayerNorm(d, eps)
        self.intermediate = ViTIntermediate(config)
        self.output = ViTDense(config.intermediate_size, d)

    def forward(self, op, x):
        x = op.Add(x, self.attention(op, self.layernorm_before(op, x)))
        return op.Add(x, self.output(op, self.intermediate(op, self.layernorm_after(op, x))))


class ViTEncoder(nn.Module):
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList([ViTLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, op, x):
        for layer in self.layer:
            x = layer(op, x)
        return x


class ViTPooler(nn.Module):
    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.dense = Linear(config.hidden_size, config.pooled_size, bias=True)
        self.act = get_activation(config.pooler_act)

    def forward(self, op, x):
        first = op.Gather(x, op.Constant(value_int=0), axis=1)  # [batch, hidden]
        return self.act(op, self.dense(op, first))


class ViTModel(nn.Module):
    embeddings_class = ViTEmbeddings

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.embeddings = self.embeddings_class(config)
        self.encoder = ViTEncoder(config)
        self.layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        with_pooler = config.pooler and config.head == "none"
        self.pooler = ViTPooler(config) if with_pooler else None

    def forward(self, op, pixel_values):
        x = self.layernorm(op, self.encoder(op, self.embeddings(op, pixel_values)))
        return x, None if self.pooler is None else self.pooler(op, x)


class ViTForImageClassification(Model):
    """The encoder and, with ``--head image-classification``, the classifier on the class token."""

    config_class = ViTConfig
    task = "image-classification"
    base_model_prefix = "vit"
    model_class = ViTModel
    #: The heads beside the backbone: a bare ``ViTModel`` checkpoint lacks them and the prefix.
    head_prefixes: tuple[str, ...] = ("classifier",)

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.config = config
        setattr(self, self.base_model_prefix, self.model_class(config))
        classify = config.head == "image-classification"
        self.classifier = Linear(config.hidden_size, config.num_labels, True) if classify else None

    @property
    def base_model(self) -> ViTModel:
        return getattr(self, self.base_model_prefix)

    def output_shapes(self) -> dict[str, list]:
        tokens = self.config.num_patches + self.base_model.embeddings.extra_tokens
        return {
            "last_hidden_state": ["batch", tokens, self.config.hidden_size],
            "pooler_output": ["batch", self.config.pooled_size],
            "logits": ["batch", self.config.num_labels],
        }

    def classify(self, op, hidden):
        """``[batch, num_labels]`` from the final states (ViT: the class token)."""
        return self.classifier(op, op.Gather(hidden, op.Constant(value_int=0), axis=1))

    def forward(self, op, pixel_values):
        hidden, pooled = self.base_model(op, pixel_values)
        outputs = {"last_hidden_state": hidden}
        if pooled is not None:
            outputs["pooler_output"] = pooled
        if self.classifier is not None:
            outputs["logits"] = self.classify(op, hidden)
        return outputs

    @property
    def ignored(self) -> tuple[str, ...]:
        """Tensors no graph of this head reads (the pooler under a classifier, the other head)."""
        prefix = self.base_model_prefix
        ignored = [f"{prefix}.embeddings.mask_token"]
        if self.base_model.pooler is None:
            ignored.append(f"{prefix}.pooler.*")
        if self.classifier is None:
            ignored.append("classifier.*")
        return tuple(ignored)

    def sanitize(self, weights: dict) -> dict:
        """A bare ``ViTModel`` checkpoint gets the ``vit.`` prefix."""
        return prefix_bare_names(weights, f"{self.base_model_prefix}.", self.head_prefixes)


MODEL_TYPES = {"vit": ViTForImageClassification}
