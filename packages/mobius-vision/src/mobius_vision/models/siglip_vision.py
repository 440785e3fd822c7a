"""SigLIP's vision tower: patches with learned positions (no class token), CLIP's pre-norm layers,
``post_layernorm`` on every token, and a multi-head attention-pooling ``head``.

``pooler_output`` is the head's output (``vision_use_head``): a learned ``probe``
query attends over the final states, then a residual MLP. The module tree follows
the original checkpoints (``vision_model.embeddings.patch_embedding``...,
``vision_model.head.attention.in_proj_weight``); a ``SiglipVisionModel`` saved by
transformers 5 lacks the ``vision_model.`` prefix, which is added back.
Vision–language models take :class:`SiglipVisionTransformer` as their tower and
pick one of its :meth:`~SiglipVisionTransformer.hidden_states`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, TransposedParameter, bidirectional_attention
from mobius.errors import ConfigError
from mobius_vision.config import VisionConfig
from mobius_vision.models._common import VisionTowerModel
from mobius_vision.models.clip_vision import CLIPMLP, CLIPEncoder, PositionTable
from mobius_vision.models.vit import PatchConv


@dataclass
class SiglipVisionConfig(VisionConfig):
    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    patch_size: int = 16
    hidden_act: str = "gelu_pytorch_tanh"
    layer_norm_eps: float = 1e-6
    vision_use_head: bool = True

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        patch = getattr(hf_config, "patch_size", 16)
        if not isinstance(patch, int):
            raise ConfigError(f"patch_size {patch!r}: SigLIP's patches are square (one int)")
        return dict(
            fields,
            hidden_size=hf_config.hidden_size,
            intermediate_size=hf_config.intermediate_size,
            num_hidden_layers=hf_config.num_hidden_layers,
            num_attention_heads=hf_config.num_attention_heads,
            patch_size=patch,
            hidden_act=hf_config.hidden_act,
            layer_norm_eps=hf_config.layer_norm_eps,
            vision_use_head=bool(getattr(hf_config, "vision_use_head", True)),
        )

    @property
    def num_patches(self) -> int:
        height, width = self.image_size
        return (height // self.patch_size) * (width // self.patch_size)


class SiglipVisionEmbeddings(nn.Module):
    """``patch_embedding(pixels) + position_embedding``, ``[batch, patches, hidden]``."""

    def __init__(self, config: SiglipVisionConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.patch_embedding = PatchConv(config.num_channels, d, config.patch_size)
        self.position_embedding = PositionTable(config.num_patches, d)

    def forward(self, op, pixel_values):
        return op.Add(self.patch_embedding(op, pixel_values), self.position_embedding(op))


class PoolingAttention(nn.Module):
    """``torch.nn.MultiheadAttention`` of one query: the packed ``in_proj_weight [3*hidden, hidden]``."""

    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.in_proj_weight = TransposedParameter(
            3 * hidden_size, hidden_size
        )  # [hidden, 3*hidden]
        self.in_proj_bias = nn.Parameter([3 * hidden_size])
        self.out_proj = Linear(hidden_size, hidden_size, bias=True)
        self.num_heads, self.scale = num_heads, (hidden_size // num_heads) ** -0.5

    def forward(self, op, query, x):
        wq, wk, wv = op.Split(
            self.in_proj_weight, axis=1, num_outputs=3, _outputs=3
        )  # [hidden, hidden]
        bq, bk, bv = op.Split(self.in_proj_bias, axis=0, num_outputs=3, _outputs=3)
        q = op.Add(op.MatMul(query, wq), bq)  # [batch, 1, hidden]
        k, v = op.Add(op.MatMul(x, wk), bk), op.Add(op.MatMul(x, wv), bv)
        y = bidirectional_attention(op, q, k, v, None, self.num_heads, self.scale)
        return self.out_proj(op, y)


class SiglipMultiheadAttentionPoolingHead(nn.Module):
    """``probe`` attends over the tokens, then ``h + mlp(layernorm(h))``: ``[batch, hidden]``."""

    def __init__(self, config: SiglipVisionConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.probe = nn.Parameter([1, 1, d])
        self.attention = PoolingAttention(d, config.num_attention_heads)
        self.layernorm = LayerNorm(d, config.layer_norm_eps)
        self.mlp = CLIPMLP(d, config.intermediate_size, config.hidden_act)

    def forward(self, op, x):
        batch = op.Shape(x, start=0, end=1)
        probe = op.Expand(self.probe, op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0))
        h = self.attention(op, probe, x)  # [batch, 1, hidden]
        h = op.Add(h, self.mlp(op, self.layernorm(op, h)))
        return op.Squeeze(h, [1])


class SiglipVisionTransformer(nn.Module):
    """The tower (HF ``SiglipVisionModel``): embeddings, encoder, ``post_layernorm``, ``head``."""

    embeddings_class = SiglipVisionEmbeddings  # SigLIP 2 embeds its patches its own way

    def __init__(self, config: SiglipVisionConfig) -> None:
        super().__init__()
        self.embeddings = self.embeddings_class(config)
        self.encoder = CLIPEncoder(config)
        self.post_layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        use_head = config.vision_use_head
        self.head = SiglipMultiheadAttentionPoolingHead(config) if use_head else None

    def hidden_states(self, op, pixel_values, num_layers: int | None = None) -> list:
        """transformers' ``hidden_states``: the embeddings, then each layer's output.

        ``num_layers`` stops after that many layers (a vision–language model reads an
        inner layer and need not run the rest).
        """
        return self.encoder(op, self.embeddings(op, pixel_values), None, num_layers)

    def forward(self, op, pixel_values):
        """``(last_hidden_state, pooler_output or None)``."""
        x = self.post_layernorm(op, self.hidden_states(op, pixel_values)[-1])
        return x, None if self.head is None else self.head(op, x)


class SiglipVisionModel(VisionTowerModel):
    """``vision_model``: ``last_hidden_state`` and, with the pooling head, ``pooler_output``."""

    config_class = SiglipVisionConfig
    tower_class = SiglipVisionTransformer

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        return {
            "last_hidden_state": ["batch", c.num_patches, c.hidden_size],
            "pooler_output": ["batch", c.hidden_size],
        }

    def forward(self, op, pixel_values):
        hidden, pooled = self.vision_model(op, pixel_values)
        outputs = {"last_hidden_state": hidden}
        if pooled is not None:
            outputs["pooler_output"] = pooled
        return outputs


MODEL_TYPES = {"siglip_vision_model": SiglipVisionModel}
