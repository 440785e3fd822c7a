"""T2I-Adapter: Stable Diffusion (XL) whose UNet adds an adapter's features of a condition image.

The adapter (``adapter/model.onnx``) runs once on the condition image; its
``features.{i}``, times ``adapter_conditioning_scale``, feed the UNet's
``down_intrablock_additional_residuals.{i}`` (the UNet built with ``--unet-residuals
adapter``, which a whole-pipeline build sets): one per down block, then the mid
block's when the adapter has one more feature of the last one's shape (the SDXL
adapters), as diffusers pops them. A UNet input with no feature gets zeros
``[batch, channels, 1, 1]``, which broadcast and add nothing.
"""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError, MobiusError
from mobius_diffusion.pipelines.image_input import load_image
from mobius_diffusion.pipelines.sd import StableDiffusionRunner, StableDiffusionXLRunner

FEATURE_INPUT = "down_intrablock_additional_residuals"


def adapter_image(image, height: int, width: int) -> np.ndarray:
    """diffusers' ``_preprocess_adapter_image``: a Lanczos resize to ``width`` x ``height``,
    ``[1, channels, H, W]`` float32 in [0, 1] (a grayscale image keeps its one channel)."""
    from PIL import Image

    pixels = np.asarray(image.resize((width, height), resample=Image.LANCZOS), dtype=np.float32)
    pixels = pixels[..., None] if pixels.ndim == 2 else pixels
    return (pixels / 255).transpose(2, 0, 1)[None]


class StableDiffusionAdapterRunner(StableDiffusionRunner):
    """``StableDiffusionAdapterPipeline``: SD with one T2I-Adapter (no MultiAdapter).

    The image size is by default the condition image's, rounded down to a multiple
    of the adapter's ``downscale_factor``.
    """

    #: The call option ``mobius generate --control-scale`` sets.
    control_scale_option = "adapter_conditioning_scale"

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        self._features: list[np.ndarray] = []
        self._feature_fraction = 1.0
        inputs = self.session("unet/model").get_inputs()
        #: The UNet's feature inputs in order, and each one's channel count.
        self.feature_channels = {
            i.name: i.shape[1] for i in inputs if i.name.startswith(f"{FEATURE_INPUT}.")
        }
        if not self.feature_channels:
            raise ConfigError(
                f"{self.package_dir}/unet/model.onnx takes no adapter features; build the "
                "whole pipeline with mobius (its unet gets --unet-residuals adapter)"
            )

    def __call__(
        self,
        prompt,
        *,
        image,
        adapter_conditioning_scale: float = 1.0,
        height: int | None = None,
        width: int | None = None,
        **options,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt`` under condition ``image``
        (a PIL image or an image file, see :meth:`condition_mode`); ``adapter_conditioning_scale`` multiplies the features.
        Other options are the base runner's."""
        image = self.condition_mode(load_image(image, "condition image", rgb=False))
        factor = self.config_int("adapter", "downscale_factor")
        height = height or image.height // factor * factor
        width = width or image.width // factor * factor
        if height < 1 or width < 1:
            raise MobiusError(
                f"a condition image of {image.width}x{image.height} is below the adapter's "
                f"{factor} pixels"
            )
        condition = adapter_image(image, height, width)
        names = self.outputs("adapter/model")
        features = self.run_outputs("adapter/model", {"condition": condition}, names)
        self._features = [f * np.float32(adapter_conditioning_scale) for f in features]
        try:
            return super().__call__(prompt, height=height, width=width, **options)
        finally:
            self._features = []

    def condition_mode(self, image):
        """The image in the adapter's channels: grayscale for a one-channel adapter (a sketch
        adapter), else RGB (a file is read in RGB; diffusers takes the PIL image as given)."""
        mode = "L" if self.config_int("adapter", "in_channels") == 1 else "RGB"
        return image if image.mode == mode else image.convert(mode)

    def predict_noise(self, feeds: dict[str, np.ndarray], step: int, steps: int) -> np.ndarray:
        """The UNet with the adapter's features (repeated to the feeds' batch) in the steps
        that take them; zeros in the others and for inputs with no feature."""
        batch = feeds["sample"].shape[0]
        features = self._features if step < int(steps * self._feature_fraction) else []
        blocks = len(self.config("unet")["down_block_types"])
        # the feature after the down blocks' goes to the mid block only in the last one's shape
        if len(features) > blocks and features[blocks].shape != features[blocks - 1].shape:
            features = features[:blocks]
        added = {}
        for i, (name, channels) in enumerate(self.feature_channels.items()):
            if i < len(features):
                added[name] = np.repeat(features[i], batch, axis=0)
            else:
                added[name] = np.zeros((batch, channels, 1, 1), np.float32)
        return super().predict_noise({**feeds, **added}, step, steps)


class StableDiffusionXLAdapterRunner(StableDiffusionAdapterRunner, StableDiffusionXLRunner):
    """``StableDiffusionXLAdapterPipeline``: SDXL's conditioning with a T2I-Adapter;
    ``adapter_conditioning_factor`` is the fraction of the steps that take its features.
    As diffusers' pipeline, the VAE's ``latents_mean``/``latents_std`` are not applied."""

    def __call__(self, prompt, *, adapter_conditioning_factor: float = 1.0, **options):
        """:class:`StableDiffusionAdapterRunner`'s call, the features in the first
        ``int(steps * adapter_conditioning_factor)`` steps only."""
        if not 0 <= adapter_conditioning_factor <= 1:
            raise ConfigError(
                f"adapter_conditioning_factor {adapter_conditioning_factor} is not in [0, 1]"
            )
        self._feature_fraction = adapter_conditioning_factor
        try:
            return super().__call__(prompt, **options)
        finally:
            self._feature_fraction = 1.0

    def unscale_latents(self, latents: np.ndarray) -> np.ndarray:
        """Divided by the VAE's ``scaling_factor`` only."""
        return StableDiffusionRunner.unscale_latents(self, latents)
