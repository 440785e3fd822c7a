"""IP-Adapter: Stable Diffusion (XL) whose UNet also attends to an image prompt.

A package built with ``mobius build --model <pipeline> out/ --ip-adapter FILE``
(:mod:`mobius_diffusion.ip_adapter_pipeline`) holds the adapter's image projection in
``ip_adapter/`` and a ``unet`` that takes ``ip_adapter_image_embeds`` and
``ip_adapter_scale``. As diffusers' ``prepare_ip_adapter_image_embeds``: the image,
prepared by ``feature_extractor/`` (CLIP's image processor; needs mobius-vision), goes
through ``image_encoder/model``: its ``image_embeds`` for a plain IP-Adapter, its
``penultimate_hidden_state`` (``hidden_states[-2]``) for a Full one; the negative rows
of classifier-free guidance are zeros (plain) or the encoding of a zero image (Full).
Both go through ``ip_adapter/model`` to the image tokens the UNet attends to.
"""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.image_input import load_image
from mobius_diffusion.pipelines.sd import StableDiffusionRunner, StableDiffusionXLRunner

#: The package folder of the adapter's image projection (``model.onnx``, ``config.json``).
IP_ADAPTER_COMPONENT = "ip_adapter"
#: The UNet inputs of a build with ``--ip-adapter``.
UNET_INPUTS = {"ip_adapter_image_embeds", "ip_adapter_scale"}


class IPAdapterMixin:
    """The image prompt of a Stable Diffusion runner: ``ip_adapter_image`` and
    ``ip_adapter_scale`` (default 1.0, as diffusers' ``load_ip_adapter`` sets) among the
    call options, one image for every prompt."""

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        self.kind = self.config(IP_ADAPTER_COMPONENT).get("kind")
        if self.kind not in ("ip-adapter", "full"):
            raise ConfigError(f"{IP_ADAPTER_COMPONENT}/config.json kind {self.kind!r} is not run")
        if not self.graph_inputs("unet/model") >= UNET_INPUTS:
            raise ConfigError(
                f"{self.package_dir}/unet/model.onnx takes no IP-Adapter image tokens; build "
                "the whole pipeline with mobius build --ip-adapter FILE"
            )
        needed = "image_embeds" if self.kind == "ip-adapter" else "penultimate_hidden_state"
        if needed not in self.outputs("image_encoder/model"):
            raise ConfigError(
                f"this IP-Adapter reads the image encoder's {needed}, which "
                "image_encoder/model.onnx does not give (a CLIPVisionModelWithProjection does)"
            )

    def image_features(self, pixels: np.ndarray) -> np.ndarray:
        """What the adapter's projection reads of ``pixels``: CLIP's ``image_embeds`` [n, d]
        (plain) or ``penultimate_hidden_state`` [n, tokens, width] (Full)."""
        output = "image_embeds" if self.kind == "ip-adapter" else "penultimate_hidden_state"
        return self.run("image_encoder/model", {"pixel_values": pixels}, output)

    def image_prompt_embeds(self, image, batch: int, guided: bool) -> np.ndarray:
        """``[rows, tokens, cross_attention_dim]``: the image's tokens for each of ``batch``
        prompts, the negative rows first if ``guided``."""
        try:
            from mobius_vision.processing.classification import load_image_processor
        except ImportError:
            raise ConfigError(
                "an IP-Adapter package's CLIP image processor needs mobius-vision "
                "(pip install mobius-vision)"
            ) from None
        processor = load_image_processor(self.package_dir / "feature_extractor")
        pixels = processor(load_image(image, "IP-Adapter image"))[None]
        features = self.image_features(pixels)
        rows = [features] * batch
        if guided:
            negative = (
                np.zeros_like(features)
                if self.kind == "ip-adapter"
                else self.image_features(np.zeros_like(pixels))
            )
            rows = [negative] * batch + rows
        embeds = np.concatenate(rows)
        return self.run(
            f"{IP_ADAPTER_COMPONENT}/model", {"image_embeds": embeds}, "image_prompt_embeds"
        )

    def conditioning(
        self,
        prompts: list[str],
        negative_prompt,
        guided: bool,
        height: int,
        width: int,
        *,
        ip_adapter_image=None,
        ip_adapter_scale: float = 1.0,
        **options,
    ) -> dict[str, np.ndarray]:
        """The text conditioning of the base runner, and the image prompt's tokens and scale."""
        if ip_adapter_image is None:
            raise ConfigError(
                "an IP-Adapter package draws from an image prompt: give ip_adapter_image"
            )
        feeds = super().conditioning(prompts, negative_prompt, guided, height, width, **options)
        tokens = self.image_prompt_embeds(ip_adapter_image, len(prompts), guided)
        scale = np.asarray(ip_adapter_scale, dtype=np.float32)
        return {**feeds, "ip_adapter_image_embeds": tokens, "ip_adapter_scale": scale}


class StableDiffusionIPAdapterRunner(IPAdapterMixin, StableDiffusionRunner):
    """``StableDiffusionPipeline`` with an IP-Adapter: SD's text conditioning and the image prompt."""


class StableDiffusionXLIPAdapterRunner(IPAdapterMixin, StableDiffusionXLRunner):
    """``StableDiffusionXLPipeline`` with an IP-Adapter: SDXL's conditioning and the image prompt."""
