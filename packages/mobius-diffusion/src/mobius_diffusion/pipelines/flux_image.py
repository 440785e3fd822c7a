"""Flux from an image: image-to-image, inpainting, Fill and Kontext.

Each runner follows its diffusers pipeline (``FluxImg2ImgPipeline``, ``FluxInpaintPipeline``,
``FluxFillPipeline``, ``FluxKontextPipeline``). Images are prepared as ``VaeImageProcessor``
prepares them (:mod:`~mobius_diffusion.pipelines.image_input`) at ``height`` x ``width``
(by default 128 latents a side, as diffusers), rounded down to twice the VAE's factor (a
packed token is 2 x 2 latents). ``vae/encoder/model`` gives the posterior; its latents are
``(sample - shift_factor) * scaling_factor``, then packed. One
``numpy.random.default_rng(seed)`` draws, in diffusers' order, each posterior sample and the
initial noise (``standard_normal(dtype=float32)``).
"""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.flux import (
    FluxRunner,
    latent_image_ids,
    pack_latents,
    unpack_latents,
)
from mobius_diffusion.pipelines.image_input import (
    default_size,
    load_image,
    preprocess_image,
    preprocess_mask,
    resize_nearest,
)
from mobius_diffusion.pipelines.sd_img2img import draw, per_prompt

#: The (width, height) Kontext was trained at; the context image is resized to the nearest
#: aspect ratio among them unless ``auto_resize`` is off (diffusers' table).
PREFERRED_KONTEXT_RESOLUTIONS = (
    (672, 1568), (688, 1504), (720, 1456), (752, 1392), (800, 1328), (832, 1248),
    (880, 1184), (944, 1104), (1024, 1024), (1104, 944), (1184, 880), (1248, 832),
    (1328, 800), (1392, 752), (1456, 720), (1504, 688), (1568, 672),
)  # fmt: skip


class FluxImg2ImgRunner(FluxRunner):
    """``FluxImg2ImgPipeline``: the prompt redraws ``image``; ``strength`` (0 to 1) is the share
    of the flow-matching schedule run from the image latents noised by ``scale_noise``."""

    default_strength = 0.6
    default_guidance_scale = 7.0
    default_steps = 28
    #: The images a call takes besides the prompt (``mobius generate``'s ``--image``...).
    image_inputs = ("image",)

    def size(self, height: int | None, width: int | None) -> tuple[int, int]:
        """``(height, width)`` in pixels: diffusers' default, rounded to whole packed tokens."""
        multiple = 2 * self.vae_scale_factor()
        height = height or 128 * self.vae_scale_factor()
        width = width or 128 * self.vae_scale_factor()
        if height < multiple or width < multiple:
            raise ConfigError(f"{width}x{height} is smaller than one packed token ({multiple} px)")
        return height - height % multiple, width - width % multiple

    def encode_image(self, pixels: np.ndarray, rng: np.random.Generator | None) -> np.ndarray:
        """``(latents - shift_factor) * scaling_factor`` of ``pixels`` [batch, 3, H, W] in [-1, 1]:
        a posterior sample (one draw from ``rng``), or its mean where ``rng`` is None."""
        if "latent_parameters" not in self.outputs("vae/encoder/model"):
            raise ConfigError("this VAE's encoder gives no latent_parameters (mean, log-variance)")
        parameters = self.run("vae/encoder/model", {"sample": pixels}, "latent_parameters")
        mean, logvar = np.split(parameters, 2, axis=1)
        latents = mean
        if rng is not None:
            std = np.exp(np.float32(0.5) * np.clip(logvar, -30.0, 20.0))
            latents = mean + std * draw(rng, mean.shape)
        vae = self.config("vae")
        shift = np.float32(vae.get("shift_factor") or 0)
        return ((latents - shift) * np.float32(vae["scaling_factor"])).astype(np.float32)

    def strength_timesteps(self, scheduler, steps: int, strength: float) -> np.ndarray:
        """The timesteps ``strength`` keeps, cut as diffusers' Flux ``get_timesteps`` cuts them
        (``int(steps - steps * strength)`` skipped), the scheduler set to begin there."""
        if not 0 <= strength <= 1:
            raise ConfigError(f"strength is {strength}; it runs from 0 to 1")
        if not hasattr(scheduler, "scale_noise"):
            raise ConfigError(
                f"{self.scheduler_config.get('_class_name')} has no scale_noise in mobius: "
                "Flux starts from an image with FlowMatchEulerDiscreteScheduler"
            )
        start = int(max(steps - min(steps * strength, steps), 0))
        scheduler.set_begin_index(start * scheduler.order)
        timesteps = scheduler.timesteps[start * scheduler.order :]
        if len(timesteps) == 0:
            raise ConfigError(
                f"strength {strength} over {steps} steps leaves no step to run: raise the strength or the steps"
            )
        return timesteps

    def text_feeds(self, prompts, max_sequence_length, guidance_scale, image_ids) -> dict:
        """The transformer's feeds besides the latents and timestep."""
        text, pooled = self.encode(prompts, max_sequence_length)
        feeds = {
            "encoder_hidden_states": text,
            "pooled_projections": pooled,
            "img_ids": image_ids,
            "txt_ids": np.zeros((text.shape[1], 3), dtype=np.float32),
        }
        if "guidance" in self.graph_inputs("transformer/model"):
            feeds["guidance"] = np.full(len(prompts), guidance_scale, dtype=np.float32)
        return feeds

    def denoise(self, scheduler, timesteps, latents, feeds, channels=None, tokens=None, after=None):
        """Flow-matching steps over ``timesteps``: ``channels`` (Fill's mask) join each token's
        features, ``tokens`` (Kontext's context image) join the sequence and their predictions
        are dropped; ``after(i, latents)`` runs after step i (inpainting's blend)."""
        for i, t in enumerate(self.steps(timesteps)):
            hidden = latents
            if channels is not None:
                hidden = np.concatenate([hidden, channels], axis=2)
            if tokens is not None:
                hidden = np.concatenate([hidden, tokens], axis=1)
            timestep = np.full(latents.shape[0], t, dtype=np.float32) / np.float32(1000)
            feeds.update(hidden_states=hidden, timestep=timestep)
            noise = self.run("transformer/model", feeds, "out_hidden_states")
            latents = scheduler.step(noise[:, : latents.shape[1]], t, latents)
            latents = after(i, latents) if after else latents
        return latents

    def decode_packed(self, latents: np.ndarray, height: int, width: int) -> np.ndarray:
        """Images [batch, H, W, 3] in [0, 1] of packed latents for an image ``height`` x ``width``."""
        factor = self.vae_scale_factor()
        latents = unpack_latents(latents, height // factor, width // factor)
        return self.decode(self.unscale_shifted_latents(latents))

    def strength_schedule(self, seed, steps: int, strength: float, height: int, width: int):
        """``(scheduler, timesteps)``: Flux's schedule for an image ``height`` x ``width``, cut by ``strength``."""
        factor = self.vae_scale_factor()
        scheduler = self.flow_scheduler(
            seed, steps, (height // factor // 2) * (width // factor // 2)
        )
        return scheduler, self.strength_timesteps(scheduler, steps, strength)

    def noised_image(self, pixels, rng, scheduler, timestep, batch: int):
        """``(image latents, noise, latents)`` unpacked [batch, C, h, w]: ``pixels`` encoded
        (one posterior draw), then the noise drawn and mixed in by ``scale_noise``."""
        image_latents = per_prompt(self.encode_image(pixels, rng), batch)
        noise = draw(rng, image_latents.shape)
        return image_latents, noise, scheduler.scale_noise(image_latents, timestep, noise)

    def __call__(
        self,
        prompt: str | list[str],
        image,
        *,
        strength: float | None = None,
        num_inference_steps: int | None = None,
        guidance_scale: float | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        max_sequence_length: int = 512,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1]: ``image`` (a PIL image or a file),
        resized to ``height`` x ``width``, redrawn for ``prompt`` (see :meth:`run_from_image`)."""
        return self.run_from_image(
            prompt,
            image,
            None,
            strength=strength,
            num_inference_steps=num_inference_steps,
            guidance_scale=guidance_scale,
            height=height,
            width=width,
            seed=seed,
            max_sequence_length=max_sequence_length,
        )

    def run_from_image(
        self,
        prompt: str | list[str],
        image,
        mask_image,
        *,
        strength: float | None = None,
        num_inference_steps: int | None = None,
        guidance_scale: float | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        max_sequence_length: int = 512,
    ) -> np.ndarray:
        """The images of every runner here but Kontext's (``mask_image``: inpainting's, else
        None). Unset, ``strength``, ``num_inference_steps`` and ``guidance_scale`` are the
        pipeline's defaults."""
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        steps = num_inference_steps or self.default_steps
        strength = self.default_strength if strength is None else strength
        scale = self.default_guidance_scale if guidance_scale is None else guidance_scale
        height, width = self.size(height, width)
        pixels = preprocess_image(image, height, width)
        scheduler, timesteps = self.strength_schedule(seed, steps, strength, height, width)
        rng = np.random.default_rng(seed)
        start = self.noised_image(pixels, rng, scheduler, timesteps[0], len(prompts))
        factor = self.vae_scale_factor()
        ids = latent_image_ids(height // factor // 2, width // factor // 2)
        feeds = self.text_feeds(prompts, max_sequence_length, scale, ids)
        latents = self.denoise_image(scheduler, timesteps, feeds, start, pixels, rng, mask_image)
        return self.decode_packed(latents, height, width)

    def denoise_image(self, scheduler, timesteps, feeds, start, pixels, rng, mask_image):
        """The packed latents after the steps from ``start`` (:meth:`noised_image`'s triple);
        inpainting runners add ``mask_image`` here (``pixels``, ``rng``: the image, the draws)."""
        return self.denoise(scheduler, timesteps, pack_latents(start[2]), feeds)


class FluxInpaintRunner(FluxImg2ImgRunner):
    """``FluxInpaintPipeline``: repaints where ``mask_image`` is white with a text-to-image
    transformer; after each step the latents outside the mask are replaced by the image's,
    noised to the next timestep."""

    image_inputs = ("image", "mask_image")

    def __call__(
        self,
        prompt: str | list[str],
        image,
        mask_image,
        *,
        strength: float | None = None,
        num_inference_steps: int | None = None,
        guidance_scale: float | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        max_sequence_length: int = 512,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1]: ``image`` repainted under
        ``mask_image`` for ``prompt``, both resized to ``height`` x ``width`` (see
        :meth:`~FluxImg2ImgRunner.run_from_image`)."""
        return self.run_from_image(
            prompt,
            image,
            mask_image,
            strength=strength,
            num_inference_steps=num_inference_steps,
            guidance_scale=guidance_scale,
            height=height,
            width=width,
            seed=seed,
            max_sequence_length=max_sequence_length,
        )

    def denoise_image(self, scheduler, timesteps, feeds, start, pixels, rng, mask_image):
        """Steps that keep the image outside the mask."""
        # diffusers also encodes the masked image here, a posterior draw it never reads: the
        # last draw, so skipping it changes nothing
        image_latents, noise, latents = start
        batch, channels, grid_h, grid_w = latents.shape
        mask = preprocess_mask(mask_image, *pixels.shape[2:])
        mask = resize_nearest(mask, grid_h, grid_w)
        mask = pack_latents(np.repeat(per_prompt(mask, batch), channels, axis=1))
        image_latents, noise = pack_latents(image_latents), pack_latents(noise)

        def keep_outside_mask(i: int, latents: np.ndarray) -> np.ndarray:
            original = image_latents
            if i < len(timesteps) - 1:
                original = scheduler.scale_noise(image_latents, timesteps[i + 1], noise)
            return (1 - mask) * original + mask * latents

        latents = pack_latents(latents)
        return self.denoise(scheduler, timesteps, latents, feeds, after=keep_outside_mask)


class FluxFillRunner(FluxInpaintRunner):
    """``FluxFillPipeline`` (FLUX.1 Fill): an inpainting transformer; each token carries the
    masked image's latents and the mask's pixels under it (``factor**2`` per latent) beside
    its own, so the transformer takes ``8 * latent_channels + 4 * factor**2`` features."""

    default_strength = 1.0
    default_guidance_scale = 30.0
    default_steps = 50

    def denoise_image(self, scheduler, timesteps, feeds, start, pixels, rng, mask_image):
        """Steps with the masked image's latents and the mask beside each token's."""
        factor = self.vae_scale_factor()
        batch, channels, grid_h, grid_w = start[2].shape
        expected = 8 * channels + 4 * factor**2
        if self.config_int("transformer", "in_channels") != expected:
            raise ConfigError(
                f"a Flux Fill transformer takes {expected} input channels (latents, masked image, "
                f"mask); this one {self.config_int('transformer', 'in_channels')}"
            )
        mask = preprocess_mask(mask_image, *pixels.shape[2:])
        masked = per_prompt(self.encode_image(pixels * (1 - mask), rng), batch)
        mask = per_prompt(mask, batch)
        # the mask's factor x factor pixels under each latent become that latent's channels
        mask = mask[:, 0].reshape(batch, grid_h, factor, grid_w, factor).transpose(0, 2, 4, 1, 3)
        mask = mask.reshape(batch, factor * factor, grid_h, grid_w)
        condition = np.concatenate([pack_latents(masked), pack_latents(mask)], axis=2)
        return self.denoise(scheduler, timesteps, pack_latents(start[2]), feeds, condition)


class FluxKontextRunner(FluxImg2ImgRunner):
    """``FluxKontextPipeline`` (FLUX.1 Kontext): an edit of the context ``image``. Its latents
    (the posterior's mean) follow the noise's tokens in the sequence, with position ids
    whose first axis is 1; the prediction for them is dropped.

    The output has the area ``max_area`` at the aspect ratio of ``height`` x ``width`` (as
    diffusers sizes it); the context image is resized to the nearest of Kontext's trained
    resolutions unless ``auto_resize`` is off.
    """

    def kontext_size(self, height, width, max_area: int) -> tuple[int, int]:
        """diffusers' output size: ``max_area`` at the requested aspect ratio, in whole tokens."""
        height, width = (
            height or 128 * self.vae_scale_factor(),
            width or 128 * self.vae_scale_factor(),
        )
        if not isinstance(max_area, int) or max_area < 1:
            raise ConfigError(f"max_area is {max_area!r}, not a positive number of pixels")
        ratio = width / height
        return self.size(round((max_area / ratio) ** 0.5), round((max_area * ratio) ** 0.5))

    def context_pixels(self, image, auto_resize: bool) -> np.ndarray:
        """The context image [1, 3, H, W] in [-1, 1], sized as diffusers sizes it."""
        image = load_image(image)
        multiple = 2 * self.vae_scale_factor()
        height, width = default_size(image, multiple)
        if auto_resize:
            ratio = width / height
            _, width, height = min(
                (abs(ratio - w / h), w, h) for w, h in PREFERRED_KONTEXT_RESOLUTIONS
            )
        height, width = height - height % multiple, width - width % multiple
        return preprocess_image(image, height, width)

    def __call__(
        self,
        prompt: str | list[str],
        image=None,
        *,
        num_inference_steps: int = 28,
        guidance_scale: float = 3.5,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        max_sequence_length: int = 512,
        max_area: int = 1024**2,
        auto_resize: bool = True,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1]: ``image`` (the context; none:
        text to image) edited as ``prompt`` says."""
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        height, width = self.kontext_size(height, width, max_area)
        factor = self.vae_scale_factor()
        grid_h, grid_w = height // factor, width // factor
        rng = np.random.default_rng(seed)
        ids, context = latent_image_ids(grid_h // 2, grid_w // 2), None
        if image is not None:
            context = self.encode_image(self.context_pixels(image, auto_resize), None)
            context_ids = latent_image_ids(context.shape[2] // 2, context.shape[3] // 2)
            context_ids[:, 0] = 1
            ids = np.concatenate([ids, context_ids])
            context = pack_latents(per_prompt(context, len(prompts)))
        channels = self.config_int("transformer", "in_channels") // 4
        latents = pack_latents(draw(rng, (len(prompts), channels, grid_h, grid_w)))
        scheduler = self.flow_scheduler(seed, num_inference_steps, latents.shape[1])
        feeds = self.text_feeds(prompts, max_sequence_length, guidance_scale, ids)
        latents = self.denoise(scheduler, scheduler.timesteps, latents, feeds, tokens=context)
        return self.decode_packed(latents, height, width)
