"""Stable Diffusion 1.x/2.x and SDXL: CLIP text conditioning, a UNet with classifier-free guidance, the VAE."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide, is_listed, one_per_prompt


class StableDiffusionRunner(PipelineRunner):
    """``StableDiffusionPipeline``: CLIP text encoder, UNet with classifier-free guidance, VAE.

    A variant changes :meth:`conditioning` (the UNet's text feeds) and
    :meth:`unscale_latents`; the denoising loop is shared.
    """

    default_guidance_scale = 7.5

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        unet = self.config("unet")
        if unet.get("time_cond_proj_dim") is not None:
            raise ConfigError(
                "a UNet with time_cond_proj_dim (a latent consistency model) runs in a "
                "LatentConsistencyModelPipeline package (its model_index.json _class_name)"
            )

    def encode(self, prompts: list[str]) -> np.ndarray:
        """CLIP ``last_hidden_state`` of each prompt, padded to the tokenizer's length."""
        tokenizer = self.tokenizer("tokenizer")
        ids = self.tokenize("tokenizer", prompts, tokenizer.model_max_length)
        mask = np.ones_like(ids)  # diffusers passes no mask unless use_attention_mask
        if self.config("text_encoder").get("use_attention_mask"):
            length = ids.shape[1]
            encoded = tokenizer(prompts, padding="max_length", max_length=length, truncation=True)
            mask = np.asarray(encoded["attention_mask"], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        return self.run("text_encoder/model", feeds, "last_hidden_state")

    def conditioning(
        self, prompts: list[str], negative_prompt, guided: bool, height: int, width: int
    ) -> dict[str, np.ndarray]:
        """The UNet's conditioning feeds (``encoder_hidden_states``), negative rows first if guided."""
        embeds = self.encode(prompts)
        if guided:
            negatives = one_per_prompt(negative_prompt, len(prompts))
            embeds = np.concatenate([self.encode(negatives), embeds])
        return {"encoder_hidden_states": embeds}

    def __call__(
        self,
        prompt: str | list[str],
        *,
        negative_prompt: str | list[str] | None = None,
        num_inference_steps: int = 50,
        guidance_scale: float | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        **options,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``guidance_scale`` defaults to the pipeline's (:attr:`default_guidance_scale`).
        ``latents`` [batch, channels, H/8, W/8] replaces the seeded noise (before the
        scheduler's ``init_noise_sigma`` scaling, as diffusers takes them). ``options``
        go to :meth:`conditioning` (SDXL's ``prompt_2``, ``original_size``...).
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        unet = self.config("unet")
        factor = self.vae_scale_factor()
        height = height or unet["sample_size"] * factor
        width = width or unet["sample_size"] * factor
        if guidance_scale is None:
            guidance_scale = self.default_guidance_scale
        guided = guidance_scale > 1
        conditioning = self.conditioning(prompts, negative_prompt, guided, height, width, **options)
        scheduler = self.new_scheduler(seed)
        scheduler.set_timesteps(num_inference_steps)
        shape = (len(prompts), unet["in_channels"], height // factor, width // factor)
        if latents is None:
            latents = self.initial_noise(shape, seed)
        latents = (latents * np.float32(scheduler.init_noise_sigma)).astype(np.float32)
        steps = len(scheduler.timesteps)
        for step, t in enumerate(self.steps(scheduler.timesteps)):
            model_input = np.concatenate([latents] * 2) if guided else latents
            model_input = scheduler.scale_model_input(model_input, t)
            timestep = np.full(model_input.shape[0], t, dtype=np.float32)
            feeds = {"sample": model_input, "timestep": timestep, **conditioning}
            noise = self.predict_noise(feeds, step, steps)
            if guided:
                uncond, text = np.split(noise, 2)
                noise = guide(uncond, text, guidance_scale)
            latents = scheduler.step(noise, t, latents)
        return self.decode(self.unscale_latents(latents))

    def predict_noise(self, feeds: dict[str, np.ndarray], step: int, steps: int) -> np.ndarray:
        """The UNet's output for step ``step`` of ``steps`` (a ControlNet or T2I-Adapter
        variant adds its residuals to ``feeds``)."""
        return self.run("unet/model", feeds, "out_sample")


class StableDiffusionXLRunner(StableDiffusionRunner):
    """``StableDiffusionXLPipeline``: two CLIP encoders, pooled text and size conditioning.

    Each text encoder's ``penultimate_hidden_state`` (``hidden_states[-2]``), side by
    side, is the cross-attention context; ``text_embeds`` of the projecting encoder
    (``text_encoder_2``) and ``time_ids`` (original size, crop corner, target size)
    feed the UNet's added embedding. With ``force_zeros_for_empty_prompt`` (the
    default) and no ``negative_prompt``, the unconditional rows are zeros, as in
    diffusers. Conditioning options: ``prompt_2``, ``negative_prompt_2`` (the second
    encoder's texts, by default the first's), ``original_size`` and ``target_size``
    (``(height, width)``, by default the image's), ``crops_coords_top_left`` (``(0, 0)``).
    No invisible watermark is applied.
    """

    default_guidance_scale = 5.0

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        if not is_listed(self.index, "text_encoder_2"):
            raise ConfigError(
                "an SDXL pipeline without text_encoder_2 (its pooled text) is not run"
            )
        added = self.config("unet").get("addition_embed_type")
        if added != "text_time":
            raise ConfigError(
                f"an SDXL pipeline's UNet takes addition_embed_type text_time; this one {added!r}"
            )

    def text_encoders(self) -> list[tuple[str, str]]:
        """``(tokenizer, text encoder)`` folders in diffusers' order; ``text_encoder`` may be absent."""
        pairs = [("tokenizer", "text_encoder"), ("tokenizer_2", "text_encoder_2")]
        return [pair for pair in pairs if is_listed(self.index, pair[1])]

    def encode(self, prompts: list[str], prompts_2: list[str] | None = None):
        """``(states [batch, seq, d1 + d2], pooled [batch, projection])`` for the two encoders' texts.

        As diffusers: no attention mask, each encoder's ``penultimate_hidden_state``
        concatenated on the last axis, the first ``text_embeds`` as the pooled text.
        """
        states, pooled = [], None
        # With text_encoder absent, text_encoder_2 reads the first texts, as diffusers zips them.
        texts_per_encoder = zip(self.text_encoders(), (prompts, prompts_2 or prompts), strict=False)
        for (tokenizer, encoder), texts in texts_per_encoder:
            names = ["penultimate_hidden_state"]
            if pooled is None and "text_embeds" in self.outputs(f"{encoder}/model"):
                names.append("text_embeds")
            length = self.tokenizer(tokenizer).model_max_length
            state, *rest = self.clip_outputs(tokenizer, encoder, texts, length, names)
            states.append(state)
            pooled = rest[0] if rest else pooled
        if pooled is None:
            raise ConfigError(
                "SDXL pools text_embeds of a CLIPTextModelWithProjection; no text encoder gives it"
            )
        return np.concatenate(states, axis=-1), pooled

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
    ) -> dict[str, np.ndarray]:
        """``encoder_hidden_states``, ``text_embeds`` and ``time_ids``, negative rows first if guided."""
        embeds, pooled = self.text_conditioning(
            prompts, negative_prompt, guided, prompt_2, negative_prompt_2
        )
        sizes = [*(original_size or (height, width)), *crops_coords_top_left]
        sizes += [*(target_size or (height, width))]
        self.check_added_embedding(len(sizes), pooled.shape[-1])
        time_ids = np.tile(np.asarray(sizes, dtype=np.float32), (embeds.shape[0], 1))
        return {"encoder_hidden_states": embeds, "text_embeds": pooled, "time_ids": time_ids}

    def text_conditioning(
        self, prompts: list[str], negative_prompt, guided: bool, prompt_2, negative_prompt_2
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(states, pooled)`` of the prompts, the negative rows first if guided."""
        batch = len(prompts)
        second = one_per_prompt(prompt_2, batch) if prompt_2 else None  # "" is the first prompt too
        embeds, pooled = self.encode(prompts, second)
        if guided:
            if negative_prompt is None and self.index.get("force_zeros_for_empty_prompt", True):
                negative, negative_pooled = np.zeros_like(embeds), np.zeros_like(pooled)
            else:
                negatives = one_per_prompt(negative_prompt, batch)
                negatives_2 = (
                    one_per_prompt(negative_prompt_2, batch) if negative_prompt_2 else None
                )
                negative, negative_pooled = self.encode(negatives, negatives_2 or negatives)
            embeds = np.concatenate([negative, embeds])
            pooled = np.concatenate([negative_pooled, pooled])
        return embeds, pooled

    def check_added_embedding(self, time_id_count: int, pooled_dim: int) -> None:
        """Refuse ``time_ids`` of a length the UNet's added embedding does not take."""
        unet = self.config("unet")
        expected = unet.get("projection_class_embeddings_input_dim")
        given = unet.get("addition_time_embed_dim", 0) * time_id_count + pooled_dim
        if expected != given:
            raise ConfigError(
                f"the UNet's added embedding takes {expected} features; the pooled text and "
                f"{time_id_count} size ids give {given}"
            )

    def unscale_latents(self, latents: np.ndarray) -> np.ndarray:
        """Divided by ``scaling_factor``; with the VAE's ``latents_mean``/``latents_std``, de-normalised."""
        vae = self.config("vae")
        mean, std = vae.get("latents_mean"), vae.get("latents_std")
        if mean is None or std is None:
            return super().unscale_latents(latents)
        mean = np.asarray(mean, dtype=np.float32).reshape(1, -1, 1, 1)
        std = np.asarray(std, dtype=np.float32).reshape(1, -1, 1, 1)
        return latents * std / np.float32(vae["scaling_factor"]) + mean
