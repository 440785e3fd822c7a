"""InternVL's vision tower (InternViT): a ViT with layer scale, optional q/k RMS norms and RMS norms.

Each layer is ``x + lambda_1 * attn(norm_before(x))``, then ``x + lambda_2 *
mlp(norm_after(x))``; ``norm_type`` picks LayerNorm or RMSNorm for both norms,
``use_qk_norm`` adds an RMSNorm over the whole width of the queries and keys.
The final ``layernorm`` exists only without ``use_mean_pooling`` (transformers
computes no pooled output either way). Keys as transformers saves
``InternVLVisionModel`` (``embeddings.cls_token``, ``encoder.layer.0.attention.q_proj``,
``lambda_1``...); ``embeddings.mask_token`` (masked image modelling) is never read.
Vision–language models take :class:`InternVLVisionTransformer` as their tower.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, RMSNorm, bidirectional_attention
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_vision.config import VisionConfig
from mobius_vision.models.clip_vision import CLIPMLP
from mobius_vision.models.vit import PatchConv

_NORM_TYPES = ("layer_norm", "rms_norm")


@dataclass
class InternVLVisionConfig(VisionConfig):
    hidden_size: int = 1024
    intermediate_size: int = 4096
    num_hidden_layers: int = 24
    num_attention_heads: int = 16
    patch_size: int = 14
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-6
    norm_type: str = "layer_norm"
    attention_bias: bool = False
    use_qk_norm: bool = False
    use_absolute_position_embeddings: bool = True
    use_mean_pooling: bool = True
    use_mask_token: bool = False

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        patch = hf_config.patch_size
        patch_h, patch_w = patch if isinstance(patch, (list, tuple)) else (patch, patch)
        if patch_h != patch_w:
            raise ConfigError(f"internvl_vision: patch_size {patch!r} is not square")
        height, width = fields["image_size"]
        if hf_config.use_absolute_position_embeddings and height != width:
            raise ConfigError(
                f"internvl_vision: image_size {height}x{width} is not square; transformers "
                "resamples its position table there, which mobius does not build"
            )
        if hf_config.norm_type not in _NORM_TYPES:
            raise ConfigError(f"internvl_vision: norm_type {hf_config.norm_type!r} is unknown")
        return dict(
            fields,
            hidden_size=hf_config.hidden_size,
            intermediate_size=hf_config.intermediate_size,
            num_hidden_layers=hf_config.num_hidden_layers,
            num_attention_heads=hf_config.num_attention_heads,
            patch_size=int(patch_h),
            hidden_act=hf_config.hidden_act,
            layer_norm_eps=hf_config.layer_norm_eps,
            norm_type=hf_config.norm_type,
            attention_bias=bool(hf_config.attention_bias),
            use_qk_norm=bool(hf_config.use_qk_norm),
            use_absolute_position_embeddings=bool(hf_config.use_absolute_position_embeddings),
            use_mean_pooling=bool(hf_config.use_mean_pooling),
            use_mask_token=bool(hf_config.use_mask_token),
        )

    @property
    def num_patches(self) -> int:
        height, width = self.image_size
        return (height // self.patch_size) * (width // self.patch_size)


def make_norm(norm_type: str, dim: int, eps: float) -> nn.Module:
    return LayerNorm(dim, eps) if norm_type == "layer_norm" else RMSNorm(dim, eps)


class InternVLVisionPatchEmbeddings(nn.Module):
    def __init__(self, config: InternVLVisionConfig) -> None:
        super().__init__()
        self.projection = PatchConv(config.num_channels, config.hidden_size, config.patch_size)

    def forward(self, op, pixel_values):
        return self.projection(op, pixel_values)  # [batch, patches, hidden]


class InternVLVisionEmbeddings(nn.Module):
    """``[cls, patches]`` plus, with ``use_absolute_position_embeddings``, the learned positions."""

    def __init__(self, config: InternVLVisionConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.cls_token = nn.Parameter([1, 1, d])
        self.patch_embeddings = InternVLVisionPatchEmbeddings(config)
        with_positions = config.use_absolute_position_embeddings
        self.position_embeddings = (
            nn.Parameter([1, config.num_patches + 1, d]) if with_positions else None
        )

    def forward(self, op, pixel_values):
        patches = self.patch_embeddings(op, pixel_values)  # [batch, patches, hidden]
        batch = op.Shape(pixel_values, start=0, end=1)
        shape = op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0)
        x = op.Concat(op.Expand(self.cls_token, shape), patches, axis=1)  # [batch, tokens, hidden]
        return x if self.position_embeddings is None else op.Add(x, self.position_embeddings)


class InternVLVisionAttention(nn.Module):
    """Multi-head self-attention; ``q_norm``/``k_norm`` (RMS, eps 1e-6) span all heads at once."""

    def __init__(self, config: InternVLVisionConfig) -> None:
        super().__init__()
        d, bias = config.hidden_size, config.attention_bias
        self.q_proj = Linear(d, d, bias=bias)
        self.k_proj = Linear(d, d, bias=bias)
        self.v_proj = Linear(d, d, bias=bias)
        self.projection_layer = Linear(d, d, bias=True)
        # transformers builds them with the RMSNorm's default eps, not layer_norm_eps.
        self.q_norm = RMSNorm(d, 1e-6) if config.use_qk_norm else None
        self.k_norm = RMSNorm(d, 1e-6) if config.use_qk_norm else None
        self.num_heads = config.num_attention_heads
        self.scale = (d // self.num_heads) ** -0.5

    def forward(self, op, x):
        q, k, v = self.q_proj(op, x), self.k_proj(op, x), self.v_proj(op, x)
        if self.q_norm is not None:
            q, k = self.q_norm(op, q), self.k_norm(op, k)
        y = bidirectional_attention(op, q, k, v, None, self.num_heads, self.scale)
        return self.projection_layer(op, y)


class InternVLVisionLayer(nn.Module):
    """Pre-norm with layer scale: ``x + lambda_1 * attn(...)``, ``x + lambda_2 * mlp(...)``."""

    def __init__(self, config: InternVLVisionConfig) -> None:
        super().__init__()
        d, eps = config.hidden_size, config.layer_norm_eps
        self.attention = InternVLVisionAttention(config)
        self.mlp = CLIPMLP(d, config.intermediate_size, config.hidden_act)
        self.layernorm_before = make_norm(config.norm_type, d, eps)
        self.layernorm_after = make_norm(config.norm_type, d, eps)
        self.lambda_1 = nn.Parameter([d])
        self.lambda_2 = nn.Parameter([d])

    def forward(self, op, x):
        x = op.Add(x, op.Mul(self.lambda_1, self.attention(op, self.layernorm_before(op, x))))
        return op.Add(x, op.Mul(self.lambda_2, self.mlp(op, self.layernorm_after(op, x))))


class InternVLVisionEncoder(nn.Module):
    def __init__(self, config: InternVLVisionConfig) -> None:
        super().__init__()
        layers = [InternVLVisionLayer(config) for _ in range(config.num_hidden_layers)]
        self.layer = nn.ModuleList(layers)

    def forward(self, op, x, num_layers: int | None = None) -> list:
        """``[x, layer_1(x), ...]``: the input and each layer's output (the first ``num_layers``)."""
        states = [x]
        for layer in self.layer[:num_layers]:
            states.append(layer(op, states[-1]))
        return states


class InternVLVisionTransformer(Model):
    """The tower: embeddings, encoder and (without ``use_mean_pooling``) a final ``layernorm``."""

    def __init__(self, config: InternVLVisionConfig) -> None:
        super().__init__()
        self.embeddings = InternVLVisionEmbeddings(config)
        self.encoder = InternVLVisionEncoder(config)
        eps = config.layer_norm_eps
        self.layernorm = None if config.use_mean_pooling else LayerNorm(config.hidden_size, eps)

    def hidden_states(self, op, pixel_values, num_layers: int | None = None) -> list:
        """transformers' ``hidden_states``: the embeddings, then each layer's output.

        ``num_layers`` stops after that many layers (a vision–language model reads an
        inner layer and need not run the rest).
        """
        return self.encoder(op, self.embeddings(op, pixel_values), num_layers)

    def final_norm(self, op, x):
        """``last_hidden_state`` from the last layer's output (``layernorm``, or nothing)."""
        return x if self.layernorm is None else self.layernorm(op, x)

    def forward(self, op, pixel_values):
        return self.final_norm(op, self.hidden_states(op, pixel_values)[-1])


class InternVLVisionModel(InternVLVisionTransformer):
    """HF ``InternVLVisionModel``: ``last_hidden_state`` [batch, 1 + patches, hidden]."""

    config_class = InternVLVisionConfig
    task = "image-classification"
    tower_class = InternVLVisionTransformer

    def __init__(self, config: InternVLVisionConfig) -> None:
        config.require_no_head()
        super().__init__(config)
        self.config = config

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        return {"last_hidden_state": ["batch", c.num_patches + 1, c.hidden_size]}

    def forward(self, op, pixel_values):
        return {"last_hidden_state": super().forward(op, pixel_values)}

    @property
    def ignored(self) -> tuple[str, ...]:
        return ("embeddings.mask_token",) if self.config.use_mask_token else ()


MODEL_TYPES = {"internvl_vision": InternVLVisionModel}
