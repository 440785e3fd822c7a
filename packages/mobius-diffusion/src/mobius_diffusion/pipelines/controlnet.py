"""ControlNet: Stable Diffusion (XL) whose UNet also takes a ControlNet's residuals of a control image.

Each step the ControlNet (``controlnet/model.onnx``) reads the UNet's feeds and the
control image, and its ``down_block_res_samples.{i}`` / ``mid_block_res_sample``
feed the UNet's ``down_block_additional_residuals.{i}`` /
``mid_block_additional_residual`` (the UNet built with ``--unet-residuals
controlnet``, which a whole-pipeline build sets).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mobius.errors import ConfigError, MobiusError
from mobius_diffusion.pipelines.image_input import load_image
from mobius_diffusion.pipelines.sd import StableDiffusionRunner, StableDiffusionXLRunner


def control_image(image, height: int | None, width: int | None, multiple: int) -> np.ndarray:
    """diffusers' ControlNet control image: ``[1, 3, H, W]`` float32 in [0, 1].

    As its ``VaeImageProcessor(do_convert_rgb=True, do_normalize=False)``: the size
    (by default the image's) rounded down to a multiple of ``multiple``, a Lanczos
    resize, then RGB.
    """
    from PIL import Image

    image = load_image(image, "control image", rgb=False)
    height, width = (
        size - size % multiple for size in (height or image.height, width or image.width)
    )
    if height < 1 or width < 1:
        raise MobiusError(
            f"a control image of {image.width}x{image.height} is below {multiple} pixels"
        )
    image = image.resize((width, height), resample=Image.LANCZOS).convert("RGB")
    return (np.asarray(image, dtype=np.float32) / 255).transpose(2, 0, 1)[None]


def unet_input(residual: str) -> str:
    """The UNet input that a ControlNet output feeds (``down_block_res_samples.3`` ->
    ``down_block_additional_residuals.3``)."""
    residual = residual.replace("down_block_res_samples", "down_block_additional_residuals")
    return residual.replace("mid_block_res_sample", "mid_block_additional_residual")


@dataclass
class _Control:
    """The control of the generation in progress: its image and when and how strongly it applies."""

    image: np.ndarray
    scale: float
    start: float
    end: float

    def scale_at(self, step: int, steps: int) -> np.ndarray:
        """diffusers' ``controlnet_conditioning_scale`` times its ``controlnet_keep`` of ``step``
        (0 outside the guidance window), a float32 scalar."""
        off = step / steps < self.start or (step + 1) / steps > self.end
        return np.asarray(self.scale * (1.0 - float(off)), dtype=np.float32)


class StableDiffusionControlNetRunner(StableDiffusionRunner):
    """``StableDiffusionControlNetPipeline``: SD with one ControlNet, ``guess_mode`` off.

    The image size is by default the control image's (rounded down to the VAE's
    scale). A ControlNet with ``global_pool_conditions`` (it forces diffusers' guess
    mode) is refused; so is a multi-ControlNet pipeline.
    """

    #: The call option ``mobius generate --control-scale`` sets.
    control_scale_option = "controlnet_conditioning_scale"

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        self._control: _Control | None = None
        if self.config("controlnet").get("global_pool_conditions"):
            raise ConfigError(
                "a ControlNet with global_pool_conditions runs in diffusers' guess mode, "
                "which mobius does not run"
            )
        residuals = self.outputs("controlnet/model")
        taken = {name for name in self.graph_inputs("unet/model") if "additional_residual" in name}
        if {unet_input(name) for name in residuals} != taken:
            raise ConfigError(
                f"{self.package_dir}/unet/model.onnx does not take the ControlNet's "
                f"{len(residuals)} residuals; build the whole pipeline with mobius (its unet "
                "gets --unet-residuals controlnet)"
            )

    def __call__(
        self,
        prompt,
        *,
        image,
        controlnet_conditioning_scale: float = 1.0,
        control_guidance_start: float = 0.0,
        control_guidance_end: float = 1.0,
        height: int | None = None,
        width: int | None = None,
        **options,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt`` under control ``image``.

        ``image``: a PIL image or an image file (read in RGB). ``controlnet_conditioning_scale``
        multiplies the residuals; they apply from step fraction
        ``control_guidance_start`` to ``control_guidance_end``. Other options are
        the base runner's.
        """
        if not 0 <= control_guidance_start < control_guidance_end <= 1:
            raise ConfigError(
                f"control guidance runs from start {control_guidance_start} to end "
                f"{control_guidance_end}: expected 0 <= start < end <= 1"
            )
        pixels = control_image(image, height, width, self.vae_scale_factor())
        self._control = _Control(
            pixels, controlnet_conditioning_scale, control_guidance_start, control_guidance_end
        )
        try:
            size = {"height": pixels.shape[2], "width": pixels.shape[3]}
            return super().__call__(prompt, **size, **options)
        finally:
            self._control = None

    def predict_noise(self, feeds: dict[str, np.ndarray], step: int, steps: int) -> np.ndarray:
        """The ControlNet on the UNet's feeds (the image repeated to their batch), then the UNet."""
        control = self._control
        batch = feeds["sample"].shape[0]
        controlnet_feeds = {
            **feeds,
            "controlnet_cond": np.repeat(control.image, batch, axis=0),
            "conditioning_scale": control.scale_at(step, steps),
        }
        names = self.outputs("controlnet/model")
        residuals = self.run_outputs("controlnet/model", controlnet_feeds, names)
        feeds = {**feeds, **{unet_input(n): r for n, r in zip(names, residuals, strict=True)}}
        return super().predict_noise(feeds, step, steps)


class StableDiffusionXLControlNetRunner(StableDiffusionControlNetRunner, StableDiffusionXLRunner):
    """``StableDiffusionXLControlNetPipeline``: SDXL's conditioning (the ControlNet takes its
    ``text_embeds`` and ``time_ids`` too) with :class:`StableDiffusionControlNetRunner`'s control."""
