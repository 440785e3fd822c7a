"""AutoencoderKLQwenImage: Qwen-Image's VAE, Wan 2.1's causal 3-D VAE fine-tuned for images.

diffusers' ``AutoencoderKLQwenImage`` has the module tree, the key names, the
first-frame-then-chunks-of-4 encode, the frame-by-frame decode and the clamp of
``AutoencoderKLWan`` (Wan 2.1's layout), so :class:`AutoencoderKLWan` builds it.
Only the config differs: one ``input_channels`` for the encoder's input and the
decoder's output (Wan's ``in_channels``/``out_channels``), and none of Wan 2.2's
``decoder_base_dim``, ``is_residual`` or ``patch_size``, which diffusers ignores
here and so does this build. ``latents_mean``/``latents_std`` belong to the
pipeline. The graphs are Wan's: ``encoder/model`` ``sample`` [b, c, frames, h, w]
-> ``latent_parameters``; ``decoder/model`` ``latent_sample`` -> ``sample``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from mobius_diffusion.models.autoencoder_kl_wan import AutoencoderKLWan, AutoencoderKLWanConfig
from mobius_diffusion.models.wan import positive_int

#: The config fields the two VAEs share (diffusers' names).
_SHARED_FIELDS = ("base_dim", "z_dim", "dim_mult", "num_res_blocks", "attn_scales")
_SHARED_FIELDS += ("temperal_downsample",)


@dataclass
class AutoencoderKLQwenImageConfig(AutoencoderKLWanConfig):
    @classmethod
    def from_hf(cls, config: Any) -> AutoencoderKLQwenImageConfig:
        """Wan's checks on the shared fields; ``input_channels`` (default 3) is both ends' width."""
        channels = positive_int(
            "AutoencoderKLQwenImage", "input_channels", getattr(config, "input_channels", 3)
        )
        shared = {k: getattr(config, k) for k in _SHARED_FIELDS if hasattr(config, k)}
        wan_view = SimpleNamespace(in_channels=channels, out_channels=channels, **shared)
        return super().from_hf(wan_view)


class AutoencoderKLQwenImage(AutoencoderKLWan):
    """diffusers' ``AutoencoderKLQwenImage``: Wan 2.1's VAE graphs, Qwen-Image's config."""

    config_class = AutoencoderKLQwenImageConfig


MODEL_TYPES = {"AutoencoderKLQwenImage": AutoencoderKLQwenImage}
