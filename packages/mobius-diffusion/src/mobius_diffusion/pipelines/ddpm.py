"""DDPM: unconditional images, denoised in pixel space by a UNet2DModel."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner


class DDPMRunner(PipelineRunner):
    """``DDPMPipeline``: no prompt, no VAE; the UNet's own ``sample_size`` of pixels.

    As diffusers: the noise is not scaled by the scheduler's ``init_noise_sigma`` nor the
    model input by ``scale_model_input`` (identities for DDPM and DDIM); each step is the
    scheduler's (DDPM's adds noise after every step but the last, drawn from
    :meth:`new_scheduler`'s generator); the final sample is the image, mapped from
    [-1, 1] to [0, 1].
    """

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        if self.config("unet").get("num_class_embeds") is not None:
            raise ConfigError(
                "a class-conditional UNet2DModel (num_class_embeds) does not run in a "
                "DDPMPipeline: it takes no class labels"
            )

    def sample_shape(self) -> tuple[int, int]:
        """The UNet's ``sample_size``: one side, or (height, width)."""
        size = self.config("unet").get("sample_size")
        sides = size if isinstance(size, list) else [size]
        if len(sides) not in (1, 2) or any(
            not isinstance(s, int) or isinstance(s, bool) or s < 1 for s in sides
        ):
            raise ConfigError(f"unet/config.json sample_size is {size!r}, not a size in pixels")
        return (sides[0], sides[-1])

    def __call__(
        self,
        prompt: str | None = "",
        *,
        batch_size: int = 1,
        num_inference_steps: int = 1000,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        **options,
    ) -> np.ndarray:
        """``batch_size`` images ``[batch, H, W, 3]`` float32 in [0, 1].

        The prompt must be empty (``mobius generate PACKAGE ""``): DDPM draws
        unconditional images. ``latents`` [batch, channels, H, W] replaces the seeded
        noise. Options other runners take (``guidance_scale``, ``height``...) are refused.
        """
        if prompt:
            raise ConfigError('a DDPMPipeline draws unconditional images: give the empty prompt ""')
        given = sorted(name for name, value in options.items() if value is not None)
        if given:
            raise ConfigError(
                f"a DDPMPipeline draws unconditional images of its UNet's sample_size; "
                f"it takes no {', '.join(given)}"
            )
        shape = (batch_size, self.config_int("unet", "in_channels"), *self.sample_shape())
        image = self.given_or_initial_latents(latents, shape, seed)
        scheduler = self.new_scheduler(seed)
        scheduler.set_timesteps(num_inference_steps)
        for t in self.steps(scheduler.timesteps):
            timestep = np.full(image.shape[0], t, dtype=np.float32)
            output = self.run("unet/model", {"sample": image, "timestep": timestep}, "out_sample")
            image = scheduler.step(output, t, image)
        return np.clip(image / 2 + 0.5, 0, 1).transpose(0, 2, 3, 1)
