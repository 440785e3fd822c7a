"""CLIP's vision tower: a ViT with a bias-free patch conv, a LayerNorm before the encoder, and
``post_layernorm`` on the class token as the pooled output.

Checkpoints name the tower ``vision_model.*`` (``CLIPVisionModelWithProjection`` and the hub's
``CLIPVisionModel`` files), or leave the prefix out (``CLIPVisionModel`` as transformers 5
saves it); both are read. ``visual_projection`` gives ``image_embeds`` where the checkpoint
has one. Vision–language models take :class:`CLIPVisionTransformer` as their tower and pick
one of its :meth:`~CLIPVisionTransformer.hidden_states`. The model also gives
``penultimate_hidden_state``, transformers' ``hidden_states[-2]`` (the state before the
last layer), which Wan's image-to-video pipelines condition on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear, module_scope
from mobius_text.models import clip_text
from mobius_text.models.clip_text import CLIPMLP  # noqa: F401  (the towers built on CLIP import it here)
from mobius_vision.config import VisionConfig
from mobius_vision.models._common import VisionTowerModel
from mobius_vision.models.vit import PatchConv


@dataclass
class CLIPVisionConfig(VisionConfig):
    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    patch_size: int = 32
    hidden_act: str = "quick_gelu"
    layer_norm_eps: float = 1e-5
    projection_dim: int = 0  # 0: no visual_projection in the checkpoint

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        fields = super().hf_fields(hf_config)
        with_projection = any(a.endswith("WithProjection") for a in fields["architectures"])
        return dict(
            fields,
            hidden_size=hf_config.hidden_size,
            intermediate_size=hf_config.intermediate_size,
            num_hidden_layers=hf_config.num_hidden_layers,
            num_attention_heads=hf_config.num_attention_heads,
            patch_size=hf_config.patch_size,
            hidden_act=hf_config.hidden_act,
            layer_norm_eps=hf_config.layer_norm_eps,
            projection_dim=hf_config.projection_dim if with_projection else 0,
        )

    @property
    def num_positions(self) -> int:
        height, width = self.image_size
        return (height // self.patch_size) * (width // self.patch_size) + 1


class CLIPVisionEmbeddings(nn.Module):
    """``[class, patches] + position_embedding``."""

    def __init__(self, config: CLIPVisionConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.class_embedding = nn.Parameter([d])
        self.patch_embedding = PatchConv(config.num_channels, d, config.patch_size, bias=False)
        self.position_embedding = PositionTable(config.num_positions, d)

    def forward(self, op, pixel_values):
        patches = self.patch_embedding(op, pixel_values)  # [batch, patches, hidden]
        batch = op.Shape(pixel_values, start=0, end=1)
        shape = op.Concat(batch, op.Constant(value_ints=[1, 1]), axis=0)  # [batch, 1, 1]
        cls = op.Expand(op.Reshape(self.class_embedding, op.Constant(value_ints=[1, 1, -1])), shape)
        x = op.Concat(cls, patches, axis=1)  # [batch, positions, hidden]
        return op.Add(x, self.positions(op))

    def positions(self, op):
        """``[positions, hidden]``: the learned table as it is (CLIPSeg resizes it)."""
        return self.position_embedding(op)


class PositionTable(nn.Module):
    """A learned ``weight [positions, hidden]`` added whole (an ``nn.Embedding`` read in order)."""

    def __init__(self, positions: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter([positions, dim])

    def forward(self, op):
        return op.Identity(self.weight)


class CLIPEncoder(clip_text.CLIPEncoder):
    """The encoder of a CLIP-like vision config: the text tower's layers, read from the config."""

    def __init__(self, config) -> None:
        c = config
        super().__init__(
            c.num_hidden_layers,
            c.hidden_size,
            c.num_attention_heads,
            c.intermediate_size,
            c.hidden_act,
            c.layer_norm_eps,
        )


class CLIPVisionTransformer(nn.Module):
    """The tower (HF ``CLIPVisionModel``): embeddings, ``pre_layrnorm``, encoder, ``post_layernorm``."""

    def __init__(self, config: CLIPVisionConfig) -> None:
        super().__init__()
        self.embeddings = CLIPVisionEmbeddings(config)
        self.pre_layrnorm = LayerNorm(config.hidden_size, config.layer_norm_eps)
        self.encoder = CLIPEncoder(config)
        self.post_layernorm = LayerNorm(config.hidden_size, config.layer_norm_eps)

    def hidden_states(self, op, pixel_values, num_layers: int | None = None) -> list:
        """transformers' ``hidden_states``: the normed embeddings, then each layer's output.

        ``num_layers`` stops after that many layers (a vision–language model reads an
        inner layer and need not run the rest).
        """
        x = self.pre_layrnorm(op, self.embeddings(op, pixel_values))  # [batch, positions, hidden]
        return self.encoder(op, x, None, num_layers)

    def forward(self, op, pixel_values):
        x = self.hidden_states(op, pixel_values)[-1]
        cls = op.Gather(x, op.Constant(value_int=0), axis=1)  # [batch, hidden]
        return x, self.post_layernorm(op, cls)


class CLIPVisionModel(VisionTowerModel):
    """``vision_model`` and, for ``CLIPVisionModelWithProjection``, ``visual_projection``."""

    config_class = CLIPVisionConfig
    tower_class = CLIPVisionTransformer
    head_prefixes = ("visual_projection.",)

    def __init__(self, config: CLIPVisionConfig) -> None:
        super().__init__(config)
        d, projection = config.hidden_size, config.projection_dim
        self.visual_projection = Linear(d, projection, bias=False) if projection else None

    def output_shapes(self) -> dict[str, list]:
        c = self.config
        return {
            "last_hidden_state": ["batch", c.num_positions, c.hidden_size],
            "penultimate_hidden_state": ["batch", c.num_positions, c.hidden_size],
            "pooler_output": ["batch", c.hidden_size],
            "image_embeds": ["batch", c.projection_dim],
        }

    def forward(self, op, pixel_values):
        tower = self.vision_model
        with module_scope(op, tower):  # the tower's own parameter names
            states = tower.hidden_states(op, pixel_values)
            cls = op.Gather(states[-1], op.Constant(value_int=0), axis=1)  # [batch, hidden]
            pooled = tower.post_layernorm(op, cls)
        outputs = {"last_hidden_state": states[-1], "penultimate_hidden_state": states[-2]}
        if self.visual_projection is not None:
            return {**outputs, "image_embeds": self.visual_projection(op, pooled)}
        return {**outputs, "pooler_output": pooled}

    #: A buffer older checkpoints saved; the graph numbers the positions itself.
    ignored = ("vision_model.embeddings.position_ids",)


MODEL_TYPES = {"clip_vision_model": CLIPVisionModel}
