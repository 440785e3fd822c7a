"""What Kandinsky 2.2's ``UNet2DConditionModel`` adds: the image embedding as the cross-attention's
context (``encoder_hid_dim_type="image_proj"``) and added to the time embedding
(``addition_embed_type="image"``)."""

from __future__ import annotations

from typing import Any

from onnxscript import nn

from mobius.components import LayerNorm, Linear
from mobius.errors import ConfigError
from mobius_diffusion.models._checks import config_int


def check_image_conditioning(config: Any, c) -> None:
    """Kandinsky 2.2's image conditioning (``encoder_hid_dim``) and the simple blocks' text norm,
    of ``c`` (the UNet's config as read from ``config``): what mobius builds, else ConfigError."""
    if c.encoder_hid_dim_type not in (None, "image_proj"):
        raise ConfigError(
            f"UNet encoder_hid_dim_type {c.encoder_hid_dim_type!r} is not built by mobius; "
            "it builds None and 'image_proj'"
        )
    if c.encoder_hid_dim_type is None and c.encoder_hid_dim is not None:
        raise ConfigError(
            "UNet encoder_hid_dim without encoder_hid_dim_type (diffusers' 'text_proj') "
            "is not built by mobius"
        )
    if c.encoder_hid_dim_type or c.addition_embed_type == "image":
        config_int(config, "encoder_hid_dim")
    if c.addition_embed_type == "image" and c.encoder_hid_dim_type != "image_proj":
        raise ConfigError(
            "UNet addition_embed_type 'image' without encoder_hid_dim_type 'image_proj' "
            "is not built by mobius"
        )
    if c.cross_attention_norm not in (None, "group_norm"):
        raise ConfigError(
            f"UNet cross_attention_norm {c.cross_attention_norm!r} is not built by mobius"
        )
    if c.cross_attention_norm and any(d % 32 for d in c.cross_attention_dim):
        raise ConfigError(
            f"UNet cross_attention_dim {c.cross_attention_dim} does not split into the 32 groups "
            "of cross_attention_norm 'group_norm'"
        )


class ImageProjection(nn.Module):
    """diffusers' ``ImageProjection`` (``encoder_hid_proj``): the image embedding as 32 tokens."""

    TOKENS = 32  # diffusers' num_image_text_embeds, which the UNet leaves at its default

    def __init__(self, image_embed_dim: int, cross_attention_dim: int) -> None:
        super().__init__()
        self.image_embeds = Linear(image_embed_dim, self.TOKENS * cross_attention_dim, bias=True)
        self.norm = LayerNorm(cross_attention_dim)

    def forward(self, op, image_embeds):
        tokens = self.image_embeds(op, image_embeds)  # [b, 32 * cross]
        return self.norm(op, op.Reshape(tokens, op.Constant(value_ints=[0, self.TOKENS, -1])))


class ImageTimeEmbedding(nn.Module):
    """diffusers' ``ImageTimeEmbedding`` (``add_embedding`` of ``addition_embed_type="image"``)."""

    def __init__(self, image_embed_dim: int, time_embed_dim: int) -> None:
        super().__init__()
        self.image_proj = Linear(image_embed_dim, time_embed_dim, bias=True)
        self.image_norm = LayerNorm(time_embed_dim)

    def forward(self, op, image_embeds):
        return self.image_norm(op, self.image_proj(op, image_embeds))
