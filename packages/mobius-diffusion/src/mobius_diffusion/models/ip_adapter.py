"""IP-Adapter image projection: CLIP image embeddings to the extra tokens the UNet cross-attends to.

IP-Adapter checkpoints are single files with no config: ``image_proj.*`` (this
graph) and ``ip_adapter.*`` (the key/value projections of the UNet's image
cross-attention). The layout is recognised from the tensors, as diffusers'
``_convert_ip_adapter_image_proj_to_diffusers`` does:

- ``image_proj.proj.weight``: IP-Adapter (``ImageProjection``): a linear layer to
  4 tokens, LayerNorm;
- ``image_proj.proj.3.weight``: IP-Adapter Full (``IPAdapterFullImageProjection``):
  Linear, GELU, Linear, LayerNorm on each image token.

Graph: :class:`mobius.tasks.AdapterTask`, ``image_embeds`` [batch, image_embed_dim]
(Full: [batch, image_tokens, image_embed_dim]) -> ``image_prompt_embeds`` [batch,
tokens, cross_attention_dim]. The ``ip_adapter.*`` tensors belong to a UNet with
IP-Adapter attention (a UNet build with ``--ip-adapter FILE`` reads them; a whole
SD/SDXL pipeline build with it builds both halves): this graph leaves them out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear
from mobius.errors import ConfigError
from mobius.model import Model
from mobius_diffusion.tasks import GraphSpec

logger = logging.getLogger("mobius")

#: What diffusers' conversion assumes for the plain IP-Adapter.
IP_ADAPTER_TOKENS = 4


@dataclass
class IPAdapterConfig:
    kind: str  # "ip-adapter" | "full"
    image_embed_dim: int
    cross_attention_dim: int
    num_tokens: int = IP_ADAPTER_TOKENS

    @classmethod
    def from_hf(cls, config: Any) -> IPAdapterConfig:
        return cls(
            kind=config.kind,
            image_embed_dim=config.image_embed_dim,
            cross_attention_dim=config.cross_attention_dim,
            num_tokens=getattr(config, "num_tokens", IP_ADAPTER_TOKENS),
        )


def _layout(shapes: dict[str, tuple[int, ...]]) -> dict[str, Any] | None:
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
    if any(name.startswith("image_proj.") for name in shapes):
        raise ConfigError(
            "this IP-Adapter's image projection (Plus / FaceID resampler) is not built by mobius; "
            "it builds the plain and Full IP-Adapter projections"
        )
    return None


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
        kinds = {"ip-adapter": ImageProjection, "full": FullImageProjection}
        self.image_proj = kinds[config.kind](config)

    @staticmethod
    def config_from_weights(shapes: dict[str, tuple[int, ...]]) -> dict[str, Any] | None:
        """A config (``model_type`` included) when ``shapes`` are an IP-Adapter's, else None."""
        layout = _layout(shapes)
        if layout is not None and any(name.startswith("ip_adapter.") for name in shapes):
            logger.warning(
                "IP-Adapter: building the image projection (image_proj.*); the ip_adapter.* "
                "tensors are the UNet's image cross-attention, which a UNet or whole-pipeline "
                "build reads with --ip-adapter FILE"
            )
        return None if layout is None else {"model_type": "IPAdapterImageProjection", **layout}

    def graph_specs(self) -> dict[str, GraphSpec]:
        c = self.config
        tokens = c.num_tokens if c.kind == "ip-adapter" else "image_tokens"
        input_shape = ["batch", c.image_embed_dim]
        if c.kind == "full":
            input_shape = ["batch", "image_tokens", c.image_embed_dim]

        def forward(op, image_embeds):
            return {"image_prompt_embeds": self.image_proj(op, image_embeds)}

        return {
            "model": GraphSpec(
                {"image_embeds": (None, input_shape)},
                {"image_prompt_embeds": ["batch", tokens, c.cross_attention_dim]},
                forward,
            )
        }


MODEL_TYPES = {"IPAdapterImageProjection": IPAdapterImageProjection}
