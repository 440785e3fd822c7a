"""Stable Diffusion 1.x/2.x and SDXL from an image: image-to-image and inpainting.

Each runner follows its diffusers pipeline: the image, prepared as ``VaeImageProcessor``
prepares it (:mod:`~mobius_diffusion.pipelines.image_input`), is encoded by
``vae/encoder/model`` (``latent_parameters``: mean and log-variance) and sampled
``mean + exp(logvar / 2) * noise`` as ``retrieve_latents`` does (an encoder with no
distribution, TAESD's, gives its ``latent`` and draws nothing); ``strength`` keeps the
last ``int(steps * strength)`` timesteps and the scheduler's ``add_noise`` lifts the image
latents to the first of them. One ``numpy.random.default_rng(seed)`` draws, in diffusers'
order, each VAE sample and then the initial noise (``standard_normal(dtype=float32)``).
"""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError, MobiusError
from mobius_diffusion.pipelines.base import guide
from mobius_diffusion.pipelines.image_input import (
    default_size,
    load_image,
    preprocess_image,
    preprocess_mask,
    resize_nearest,
)
from mobius_diffusion.pipelines.sd import StableDiffusionRunner, StableDiffusionXLRunner


def draw(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Standard normal float32 noise of ``shape`` (every draw of these runners)."""
    return rng.standard_normal(shape, dtype=np.float32)


def per_prompt(latents: np.ndarray, batch: int) -> np.ndarray:
    """One image's latents repeated for each of ``batch`` prompts."""
    if batch % latents.shape[0]:
        raise MobiusError(f"{latents.shape[0]} images do not divide among {batch} prompts")
    return np.concatenate([latents] * (batch // latents.shape[0]))


class StableDiffusionImg2ImgRunner(StableDiffusionRunner):
    """``StableDiffusionImg2ImgPipeline``: the prompt redraws an image; ``strength`` (0 to 1)
    is how much of the schedule is run, so how far the result may leave the image.

    The image keeps its size, rounded down to a multiple of the VAE's scale factor.
    """

    default_strength = 0.8
    #: The images a call takes besides the prompt (``mobius generate``'s ``--image``...).
    image_inputs = ("image",)

    def noising_scheduler(self, seed: int | None, steps: int, strength: float):
        """``(scheduler, timesteps)``: the last ``int(steps * strength)`` timesteps, as
        diffusers' ``get_timesteps`` cuts them, and the scheduler set to begin there."""
        if not 0 <= strength <= 1:
            raise ConfigError(f"strength is {strength}; it runs from 0 to 1")
        scheduler = self.new_scheduler(seed)
        if not hasattr(scheduler, "add_noise"):
            raise ConfigError(
                f"{self.scheduler_config.get('_class_name')} has no add_noise in mobius: it "
                "does not start from an image (Euler, DDIM, PNDM, DPM-Solver++ and UniPC do)"
            )
        scheduler.set_timesteps(steps)
        start = steps - min(int(steps * strength), steps)
        begin = start * scheduler.order
        scheduler.set_begin_index(begin)
        timesteps = scheduler.timesteps[begin:]
        if len(timesteps) == 0:
            raise ConfigError(
                f"strength {strength} over {steps} steps leaves no step to run: raise the strength or the steps"
            )
        return scheduler, timesteps

    def encode_image(self, pixels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Scaled latents of ``pixels`` [batch, 3, H, W] in [-1, 1]: a sample of the VAE's
        posterior (one draw from ``rng``), as diffusers' ``retrieve_latents``; an encoder
        with no distribution (AutoencoderTiny's ``latent``) draws nothing."""
        outputs = self.outputs("vae/encoder/model")
        if "latent" in outputs:
            return self.scale_latents(self.run("vae/encoder/model", {"sample": pixels}, "latent"))
        if "latent_parameters" not in outputs:
            raise ConfigError("this VAE's encoder gives no latent_parameters (mean, log-variance)")
        parameters = self.run("vae/encoder/model", {"sample": pixels}, "latent_parameters")
        mean, logvar = np.split(parameters, 2, axis=1)
        std = np.exp(np.float32(0.5) * np.clip(logvar, -30.0, 20.0))
        return self.scale_latents(mean + std * draw(rng, mean.shape))

    def scale_latents(self, latents: np.ndarray) -> np.ndarray:
        """The VAE's latents as the UNet takes them: times ``scaling_factor`` (inverse of
        :meth:`unscale_latents`)."""
        return latents * np.float32(self.config("vae").get("scaling_factor", 0.18215))

    def denoise(
        self, scheduler, timesteps, latents, conditioning, guidance_scale, extra=(), after=None
    ) -> np.ndarray:
        """The denoising loop over ``timesteps``; ``extra`` latents (inpainting's mask and
        masked image) join the UNet's input channels; ``after(i, latents)`` runs after step i."""
        guided = guidance_scale > 1
        for i, t in enumerate(self.steps(timesteps)):
            model_input = np.concatenate([latents] * 2) if guided else latents
            model_input = scheduler.scale_model_input(model_input, t)
            model_input = np.concatenate([model_input, *extra], axis=1)
            timestep = np.full(model_input.shape[0], t, dtype=np.float32)
            feeds = {"sample": model_input, "timestep": timestep, **conditioning}
            noise = self.predict_noise(feeds, i, len(timesteps))
            if guided:
                noise = guide(*np.split(noise, 2), guidance_scale)
            latents = scheduler.step(noise, t, latents)
            latents = after(i, latents) if after else latents
        return latents

    def __call__(
        self,
        prompt: str | list[str],
        image,
        *,
        strength: float | None = None,
        negative_prompt: str | list[str] | None = None,
        num_inference_steps: int = 50,
        guidance_scale: float | None = None,
        seed: int | None = None,
        **options,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1]: ``image`` (a PIL image or a file)
        redrawn for ``prompt``. ``strength`` defaults to the pipeline's; ``options`` go to
        :meth:`conditioning` (SDXL's ``prompt_2``, ``aesthetic_score``...)."""
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        strength = self.default_strength if strength is None else strength
        scale = self.default_guidance_scale if guidance_scale is None else guidance_scale
        image = load_image(image)
        height, width = default_size(image, self.vae_scale_factor())
        conditioning = self.conditioning(
            prompts, negative_prompt, scale > 1, height, width, **options
        )
        scheduler, timesteps = self.noising_scheduler(seed, num_inference_steps, strength)
        rng = np.random.default_rng(seed)
        image_latents = per_prompt(
            self.encode_image(preprocess_image(image, height, width), rng), len(prompts)
        )
        latents = scheduler.add_noise(image_latents, draw(rng, image_latents.shape), timesteps[0])
        latents = self.denoise(scheduler, timesteps, latents, conditioning, scale)
        return self.decode(self.unscale_latents(latents))


class StableDiffusionInpaintRunner(StableDiffusionImg2ImgRunner):
    """``StableDiffusionInpaintPipeline``: repaints where ``mask_image`` is white.

    An inpainting UNet (9 input channels) takes the mask and the masked image's latents
    beside the latents; a text-to-image UNet (4) has the latents outside the mask
    replaced each step by the image's, noised to the next timestep. The image and mask
    are resized to ``height`` x ``width`` (by default the UNet's ``sample_size``).
    """

    default_strength = 1.0
    image_inputs = ("image", "mask_image")

    def __call__(
        self,
        prompt: str | list[str],
        image,
        mask_image,
        *,
        strength: float | None = None,
        negative_prompt: str | list[str] | None = None,
        num_inference_steps: int = 50,
        guidance_scale: float | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        **options,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1]: ``image`` repainted under
        ``mask_image`` for ``prompt``. ``latents`` replaces the seeded noise (diffusers then
        starts from it times ``init_noise_sigma``, whatever the strength)."""
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        batch = len(prompts)
        strength = self.default_strength if strength is None else strength
        scale = self.default_guidance_scale if guidance_scale is None else guidance_scale
        guided = scale > 1
        factor = self.vae_scale_factor()
        height = height or self.config_int("unet", "sample_size") * factor
        width = width or self.config_int("unet", "sample_size") * factor
        unet_channels = self.config_int("unet", "in_channels")
        channels = self.config_int("vae", "latent_channels", 4)
        if unet_channels not in (channels, 2 * channels + 1):
            raise ConfigError(
                f"an inpainting UNet takes {channels} or {2 * channels + 1} channels; "
                f"this one {unet_channels}"
            )
        inpainting_unet = unet_channels != channels
        conditioning = self.conditioning(prompts, negative_prompt, guided, height, width, **options)
        scheduler, timesteps = self.noising_scheduler(seed, num_inference_steps, strength)
        rng = np.random.default_rng(seed)
        pixels = preprocess_image(image, height, width)
        full_strength = strength == 1.0
        image_latents = None
        if not inpainting_unet or (latents is None and not full_strength):
            image_latents = per_prompt(self.encode_image(pixels, rng), batch)
        if latents is None:
            noise = draw(rng, (batch, channels, height // factor, width // factor))
            if full_strength:
                latents = noise * np.float32(scheduler.init_noise_sigma)
            else:
                latents = scheduler.add_noise(image_latents, noise, timesteps[0])
        else:
            noise = latents = np.asarray(latents, dtype=np.float32)
            latents = noise * np.float32(scheduler.init_noise_sigma)
        mask = preprocess_mask(mask_image, height, width)
        mask_latents = per_prompt(resize_nearest(mask, height // factor, width // factor), batch)
        if inpainting_unet:
            masked = self.encode_image(pixels * (mask < 0.5), rng)
            extra = [per_prompt(m, batch * (2 if guided else 1)) for m in (mask_latents, masked)]
            latents = self.denoise(scheduler, timesteps, latents, conditioning, scale, extra)
        else:

            def keep_outside_mask(i: int, latents: np.ndarray) -> np.ndarray:
                original = image_latents
                if i < len(timesteps) - 1:
                    original = scheduler.add_noise(image_latents, noise, timesteps[i + 1])
                return (1 - mask_latents) * original + mask_latents * latents

            after = keep_outside_mask
            latents = self.denoise(scheduler, timesteps, latents, conditioning, scale, after=after)
        return self.decode(self.unscale_latents(latents))


class StableDiffusionXLImg2ImgRunner(StableDiffusionImg2ImgRunner, StableDiffusionXLRunner):
    """``StableDiffusionXLImg2ImgPipeline``: SDXL's conditioning; the image latents are
    normalised by the VAE's ``latents_mean``/``latents_std`` where it has them.

    With ``requires_aesthetics_score`` in ``model_index.json`` (the SDXL refiner) the size
    ids end with ``aesthetic_score`` (6.0; 2.5 for the negative rows) instead of the target
    size. Options besides SDXL's: ``aesthetic_score``, ``negative_aesthetic_score``,
    ``negative_original_size``, ``negative_crops_coords_top_left``, ``negative_target_size``.
    """

    default_strength = 0.3

    def scale_latents(self, latents: np.ndarray) -> np.ndarray:
        """``(latents - mean) * scaling_factor / std`` with the VAE's mean and std, else scaled."""
        vae = self.config("vae")
        mean, std = vae.get("latents_mean"), vae.get("latents_std")
        if mean is None or std is None:
            return super().scale_latents(latents)
        mean = np.asarray(mean, dtype=np.float32).reshape(1, -1, 1, 1)
        std = np.asarray(std, dtype=np.float32).reshape(1, -1, 1, 1)
        return (latents - mean) * np.float32(vae["scaling_factor"]) / std

    def conditioning(
        self,
        prompts: list[str],
        negative_prompt,
        guided: bool,
        height: int,
        width: int,
        *,
        prompt_2: str | list[str] | None = None,
        negative_prompt_2: str | list[str] | None = None,
        original_size: tuple[int, int] | None = None,
        crops_coords_top_left: tuple[int, int] = (0, 0),
        target_size: tuple[int, int] | None = None,
        aesthetic_score: float = 6.0,
        negative_aesthetic_score: float = 2.5,
        negative_original_size: tuple[int, int] | None = None,
        negative_crops_coords_top_left: tuple[int, int] = (0, 0),
        negative_target_size: tuple[int, int] | None = None,
    ) -> dict[str, np.ndarray]:
        """``encoder_hidden_states``, ``text_embeds`` and ``time_ids``, negative rows first if guided."""
        embeds, pooled = self.text_conditioning(
            prompts, negative_prompt, guided, prompt_2, negative_prompt_2
        )
        original = original_size or (height, width)
        target = target_size or (height, width)
        negative_original = negative_original_size or original
        aesthetic = self.index.get("requires_aesthetics_score", False)
        if not isinstance(aesthetic, bool):
            raise ConfigError(f"model_index.json requires_aesthetics_score is {aesthetic!r}")
        if aesthetic:
            row = [*original, *crops_coords_top_left, aesthetic_score]
            negative_row = [*negative_original, *negative_crops_coords_top_left]
            negative_row += [negative_aesthetic_score]
        else:  # diffusers' negative rows keep the positive crop corner here
            row = [*original, *crops_coords_top_left, *target]
            negative_row = [*negative_original, *crops_coords_top_left]
            negative_row += [*(negative_target_size or target)]
        self.check_added_embedding(len(row), pooled.shape[-1])
        self.check_time_id_count(len(row))
        rows = [row] * len(prompts)
        rows = [negative_row] * len(prompts) + rows if guided else rows
        time_ids = np.asarray(rows, dtype=np.float32)
        return {"encoder_hidden_states": embeds, "text_embeds": pooled, "time_ids": time_ids}

    def check_time_id_count(self, count: int) -> None:
        """Refuse a UNet graph whose ``time_ids`` input is not ``count`` wide.

        mobius builds SDXL's UNet for 6 size ids; a refiner's 5 (``requires_aesthetics_score``)
        need the width set at build time, which the build does not take yet.
        """
        session = self.session("unet/model")
        shape = next((i.shape for i in session.get_inputs() if i.name == "time_ids"), None)
        width = shape[-1] if shape else None
        if isinstance(width, int) and width != count:
            raise ConfigError(
                f"this package's UNet takes {width} size ids (time_ids); the pipeline gives "
                f"{count} (requires_aesthetics_score: the SDXL refiner's UNet is not built "
                "for them by mobius yet)"
            )


class StableDiffusionXLInpaintRunner(StableDiffusionInpaintRunner, StableDiffusionXLImg2ImgRunner):
    """``StableDiffusionXLInpaintPipeline``: Stable Diffusion's inpainting with SDXL's
    conditioning (as :class:`StableDiffusionXLImg2ImgRunner`, aesthetic score included).

    As diffusers, the image latents are only scaled by ``scaling_factor``; the VAE's
    ``latents_mean``/``latents_std`` de-normalise the result alone.
    """

    default_strength = 0.9999
    default_guidance_scale = 7.5

    def scale_latents(self, latents: np.ndarray) -> np.ndarray:
        """Times ``scaling_factor`` (diffusers' SDXL inpainting normalises no further)."""
        return StableDiffusionImg2ImgRunner.scale_latents(self, latents)
