"""IP-Adapter image projection: CLIP image embeddings to the extra tokens the UNet cross-attends to.

IP-Adapter checkpoints are single files with no config: ``image_proj.*`` (this
graph) and ``ip_adapter.*`` (the key/value projections of the UNet's image
cross-attention). The layout is recognised from the tensors, as diffusers'
``_convert_ip_adapter_image_proj_to_diffusers`` does:

- ``image_proj.proj.weight``: IP-Adapter (``ImageProjection``): a linear layer to
  4 tokens, LayerNorm;
- ``image_proj.proj.3.weight``: IP-Adapter Full (``IPAdapterFullImageProjection``):
  Linear, GELU, Linear, LayerNorm on each image token;
- ``image_proj.latents``: IP-Adapter Plus; ``image_proj.norm.weight`` beside
  ``image_proj.proj.0.weight``: FaceID; ``image_proj.perceiver_resampler.*``: FaceID Plus
  (:mod:`._ip_adapter_resampler`).

Graph: :class:`mobius.tasks.AdapterTask`, ``image_embeds`` [batch, image_embed_dim]
(plain; FaceID: the face embedding) or [batch, image_tokens, image_embed_dim] (Full,
Plus, FaceID Plus: CLIP's penultimate hidden states) -> ``image_prompt_embeds`` [batch,
tokens, cross_attention_dim]. FaceID Plus also takes ``id_embeds`` [batch, id_embed_dim]
and also gives ``id_prompt_embeds`` [batch, tokens, resampler_dim] (the face tokens, which
Plus v2's shortcut adds back). The ``ip_adapter.*`` tensors belong to a UNet with
IP-Adapter attention (a UNet build with ``--ip-adapter FILE`` reads them; a whole
SD/SDXL pipeline build with it builds both halves): this graph leaves them out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.models._ip_adapter_resampler import (
    FaceIDImageProjection,
    FaceIDPlusImageProjection,
    PlusImageProjection,
    plus_or_faceid_layout,
)
from mobius_diffusion.tasks import GraphSpec

logger = logging.getLogger("mobius")

#: What diffusers' conversion assumes for the plain IP-Adapter.
IP_ADAPTER_TOKENS = 4


#: The image projections built, by the ``kind`` a config names.
KINDS = ("ip-adapter", "full", "plus", "faceid", "faceid-plus")
_RESAMPLER = ("resampler_dim", "depth", "heads", "ff_inner")
#: The optional fields each kind needs (positive).
_NEEDED = {
    "plus": _RESAMPLER,
    "faceid": ("id_inner",),
    "faceid-plus": (*_RESAMPLER, "id_inner", "id_embed_dim"),
}


@dataclass
class IPAdapterConfig:
    kind: str  # one of KINDS
    image_embed_dim: int  # CLIP's image_embeds or hidden width; FaceID: the face embedding's
    cross_attention_dim: int
    num_tokens: int = IP_ADAPTER_TOKENS
    # Plus and FaceID Plus: the resampler's width, layers, heads (of 64), feed-forward width
    resampler_dim: int = 0
    depth: int = 0
    heads: int = 0
    ff_inner: int = 0
    # FaceID (Plus): the face MLP's inner width; FaceID Plus: the face embedding's width
    id_inner: int = 0
    id_embed_dim: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"IP-Adapter kind {self.kind!r} is not one of {', '.join(KINDS)}")
        needed = {
            "image_embed_dim",
            "cross_attention_dim",
            "num_tokens",
            *_NEEDED.get(self.kind, ()),
        }
        for field in fields(self)[1:]:
            value = getattr(self, field.name)
            if type(value) is not int or value < (1 if field.name in needed else 0):
                raise ConfigError(f"IP-Adapter {self.kind} {field.name} {value!r} is out of range")

    @classmethod
    def from_hf(cls, config: Any) -> IPAdapterConfig:
        names = [f.name for f in fields(cls) if hasattr(config, f.name)]
        return cls(**{name: getattr(config, name) for name in names})


def image_proj_layout(shapes: dict[str, tuple[int, ...]]) -> dict[str, Any] | None:
    """The config of an IP-Adapter checkpoint from its tensor shapes, or None if it is not one."""
    if "image_proj.proj.weight" in shapes:
        rows, image_embed_dim = shapes["image_proj.proj.weight"]
        if rows % IP_ADAPTER_TOKENS:
            raise ConfigError(
                f"image_proj.proj.weight has {rows} rows: not {IP_ADAPTER_TOKENS} tokens"
            )
        return dict(
            kind="ip-adapter",
            image_embed_dim=image_embed_dim,
            cross_attention_dim=rows // IP_ADAPTER_TOKENS,
        )
    if "image_proj.proj.3.weight" in shapes:
        return dict(
            kind="full",
            image_embed_dim=shapes["image_proj.proj.0.weight"][0],
            cross_attention_dim=shapes["image_proj.proj.3.weight"][0],
        )
    layout = plus_or_faceid_layout(shapes)
    if layout is None and any(name.startswith("image_proj.") for name in shapes):
        raise ConfigError(
            "this IP-Adapter's image projection (image_proj.*) is none that mobius builds: "
            "plain, Full, Plus, FaceID or FaceID Plus in the original checkpoint layout"
        )
    return layout


class ImageProjection(nn.Module):
    """A linear layer to ``num_tokens`` tokens, then LayerNorm over each."""

    def __init__(self, config: IPAdapterConfig) -> None:
        super().__init__()
        self.num_tokens = config.num_tokens
        self.proj = Linear(
            config.image_embed_dim, config.num_tokens * config.cross_attention_dim, bias=True
        )
        self.norm = LayerNorm(config.cross_attention_dim)

    def forward(self, op, image_embeds):
        tokens = self.proj(op, image_embeds)  # [batch, num_tokens * cross]
        tokens = op.Reshape(tokens, op.Constant(value_ints=[0, self.num_tokens, -1]))
        return self.norm(op, tokens)


class FullImageProjection(nn.Module):
    """``proj.0`` Linear, GELU, ``proj.2`` Linear, ``proj.3`` LayerNorm (``proj.1`` is the GELU)."""

    def __init__(self, config: IPAdapterConfig) -> None:
        super().__init__()
        dim, cross = config.image_embed_dim, config.cross_attention_dim
        self.proj = nn.ModuleList(
            [
                Linear(dim, dim, bias=True),
                nn.Module(),
                Linear(dim, cross, bias=True),
                LayerNorm(cross),
            ]
        )

    def forward(self, op, image_embeds):
        hidden = op.Gelu(self.proj[0](op, image_embeds))
        return self.proj[3](op, self.proj[2](op, hidden))


class IPAdapterImageProjection(Model):
    """The ``image_proj`` half of an IP-Adapter checkpoint, recognised by :meth:`config_from_weights`."""

    config_class = IPAdapterConfig
    task = "adapter"
    #: The UNet's image cross-attention projections: not part of this graph (see the module doc).
    ignored = ("ip_adapter.*",)

    def __init__(self, config: IPAdapterConfig) -> None:
        super().__init__()
        self.config = config
        kinds = {
            "ip-adapter": ImageProjection,
            "full": FullImageProjection,
            "plus": PlusImageProjection,
            "faceid": FaceIDImageProjection,
            "faceid-plus": FaceIDPlusImageProjection,
        }
        self.image_proj = kinds[config.kind](config)

    @staticmethod
    def config_from_weights(shapes: dict[str, tuple[int, ...]]) -> dict[str, Any] | None:
        """A config (``model_type`` included) when ``shapes`` are an IP-Adapter's, else None."""
        layout = image_proj_layout(shapes)
        if layout is not None and any(name.startswith("ip_adapter.") for name in shapes):
            logger.warning(
                "IP-Adapter: building the image projection (image_proj.*); the ip_adapter.* "
                "tensors are the UNet's image cross-attention, which a UNet or whole-pipeline "
                "build reads with --ip-adapter FILE"
            )
        return None if layout is None else {"model_type": "IPAdapterImageProjection", **layout}

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        tokens = "image_tokens" if c.kind == "full" else c.num_tokens
        input_shape = ["batch", c.image_embed_dim]
        if c.kind in ("full", "plus", "faceid-plus"):
            input_shape = ["batch", "image_tokens", c.image_embed_dim]
        inputs = {"image_embeds": (None, input_shape)}
        outputs = {"image_prompt_embeds": ["batch", tokens, c.cross_attention_dim]}
        if c.kind == "faceid-plus":
            inputs = {"id_embeds": (None, ["batch", c.id_embed_dim]), **inputs}
            outputs["id_prompt_embeds"] = ["batch", tokens, c.resampler_dim]

            def forward(op, id_embeds, image_embeds):
                embeds, face = self.image_proj(op, id_embeds, image_embeds)
                return {"image_prompt_embeds": embeds, "id_prompt_embeds": face}
        else:

            def forward(op, image_embeds):
                return {"image_prompt_embeds": self.image_proj(op, image_embeds)}

        return {"model": GraphSpec(inputs, outputs, forward)}


MODEL_TYPES = {"IPAdapterImageProjection": IPAdapterImageProjection}
