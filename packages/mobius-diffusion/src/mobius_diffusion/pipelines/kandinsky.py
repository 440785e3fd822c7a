"""Kandinsky 2.2 text to image: a prior from CLIP text to a CLIP image embedding, then a UNet
conditioned on that embedding alone, decoded by MoVQ."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide, one_per_prompt, read_json
from mobius_diffusion.schedulers import load_scheduler


def downscale_height_and_width(height: int, width: int, scale_factor: int) -> tuple[int, int]:
    """The latent size of an image: ``ceil(size / factor²) * factor``, as diffusers' Kandinsky."""
    return tuple(-(-size // scale_factor**2) * scale_factor for size in (height, width))


class KandinskyV22Runner(PipelineRunner):
    """``KandinskyV22CombinedPipeline``: the prior pipeline, then the decoder pipeline.

    Prior (``prior_*`` components): each text is tokenized to the tokenizer's
    ``model_max_length`` and encoded by ``prior_text_encoder`` (a
    ``CLIPTextModelWithProjection``, no mask, as diffusers) into ``text_embeds`` and
    ``last_hidden_state``; the prior transformer, given the tokenizer's mask, denoises a
    ``[batch, embedding_dim]`` latent over ``prior_num_inference_steps`` UnCLIP steps
    (each told the next timestep), with classifier-free guidance against the empty text
    when ``prior_guidance_scale`` > 1; ``prior_prior/post_process/model`` unnormalizes
    the result into the image embedding. The negative image embedding is the prior's
    for ``negative_prompt`` (the prior then runs the prompts and the negative prompts as
    one batch, each guided against the negative prompt), else ``prior_image_encoder``'s
    ``image_embeds`` of an all-zero image.

    Decoder: the UNet takes the image embeddings (negative rows first when
    ``guidance_scale`` > 1) and no text; with guidance, the noise half of its output is
    guided and the conditional variance half kept, and the variance channels go to the
    DDPM step only when the scheduler learns its variance. MoVQ decodes the final
    latents as they are (no scaling factor).
    """

    default_guidance_scale = 4.0
    default_prior_guidance_scale = 4.0

    def vae_scale_factor(self) -> int:
        return 2 ** (len(self.config("movq")["block_out_channels"]) - 1)

    def decode_latents(self, latents: np.ndarray) -> np.ndarray:
        """MoVQ's decode, unquantized (``force_not_quantize``), as the pipeline calls it."""
        return self.run("movq/decoder/model", {"latent_sample": latents}, "sample")

    def encode_texts(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(text_embeds, last_hidden_state, attention_mask)`` of the prior's text encoder."""
        tokenizer = self.tokenizer("prior_tokenizer")
        encoded = tokenizer(
            texts, padding="max_length", max_length=tokenizer.model_max_length, truncation=True
        )
        ids = np.asarray(encoded["input_ids"], dtype=np.int64)
        mask = np.asarray(encoded["attention_mask"], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}  # diffusers: no mask
        embeds, states = self.run_outputs(
            "prior_text_encoder/model", feeds, ["text_embeds", "last_hidden_state"]
        )
        return embeds, states, mask

    def zero_image_embeds(self, batch: int) -> np.ndarray:
        """``prior_image_encoder``'s ``image_embeds`` of an all-zero image, one row per image."""
        size = self.config_int("prior_image_encoder", "image_size")
        pixels = np.zeros((1, 3, size, size), np.float32)
        embeds = self.run("prior_image_encoder/model", {"pixel_values": pixels}, "image_embeds")
        return np.repeat(embeds, batch, axis=0)

    def prior(
        self, prompts, negative_prompt, steps, guidance_scale, latents, rng
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(image_embeds, negative_image_embeds)`` for ``prompts``, as diffusers' prior pipeline."""
        negatives = (
            None if negative_prompt is None else one_per_prompt(negative_prompt, len(prompts))
        )
        texts = prompts if negatives is None else prompts + negatives
        guided = guidance_scale > 1
        embeds, states, mask = self.encode_texts(texts)
        if guided:
            uncond = self.encode_texts([""] * len(texts) if negatives is None else 2 * negatives)
            embeds, states, mask = (
                np.concatenate(pair) for pair in zip(uncond, (embeds, states, mask), strict=True)
            )
        width = self.config_int("prior_prior", "embedding_dim")
        shape = (len(texts), width)
        if latents is None:
            latents = rng.standard_normal(shape).astype(np.float32)
        elif tuple(latents.shape) != shape:
            raise ConfigError(
                f"prior latents of shape {tuple(latents.shape)} given; this needs {shape}"
            )
        config = read_json(self.package_dir / "prior_scheduler" / "scheduler_config.json")
        scheduler = load_scheduler(config, generator=rng)
        latents = latents.astype(np.float32) * scheduler.init_noise_sigma
        scheduler.set_timesteps(steps)
        timesteps = list(scheduler.timesteps)
        for i, t in enumerate(self.steps(timesteps)):
            batch = np.concatenate([latents] * 2) if guided else latents
            feeds = {
                "hidden_states": batch,
                "timestep": np.full(batch.shape[0], t, np.float32),
                "proj_embedding": embeds,
                "encoder_hidden_states": states,
                "attention_mask": mask,
            }
            predicted = self.run("prior_prior/model", feeds, "out_hidden_states")
            if guided:
                predicted = guide(*np.split(predicted, 2), guidance_scale)
            following = None if i + 1 == len(timesteps) else timesteps[i + 1]
            latents = scheduler.step(predicted, t, latents, prev_timestep=following)
        image_embeds = self.run(
            "prior_prior/post_process/model", {"latents": latents}, "image_embeds"
        )
        if negatives is None:
            return image_embeds, self.zero_image_embeds(len(prompts))
        return tuple(np.split(image_embeds, 2))

    def __call__(
        self,
        prompt: str | list[str],
        *,
        negative_prompt: str | list[str] | None = None,
        num_inference_steps: int = 100,
        guidance_scale: float | None = None,
        height: int = 512,
        width: int = 512,
        prior_num_inference_steps: int = 25,
        prior_guidance_scale: float | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        prior_latents: np.ndarray | None = None,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``prior_latents`` [batch, embedding_dim] (twice the batch with a negative prompt)
        and ``latents`` [batch, channels, h, w] (``h = ceil(H / f²) * f`` for MoVQ's factor
        ``f``) replace the noise seeded by ``seed``; see the class docstring.
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        rng = np.random.default_rng(seed)
        if prior_guidance_scale is None:
            prior_guidance_scale = self.default_prior_guidance_scale
        image_embeds, negative_embeds = self.prior(
            prompts,
            negative_prompt,
            prior_num_inference_steps,
            prior_guidance_scale,
            prior_latents,
            rng,
        )
        scale = self.default_guidance_scale if guidance_scale is None else guidance_scale
        guided = scale > 1
        if guided:
            image_embeds = np.concatenate([negative_embeds, image_embeds])
        scheduler = self.new_scheduler(seed)
        scheduler.set_timesteps(num_inference_steps)
        channels = self.config_int("unet", "in_channels")
        h, w = downscale_height_and_width(height, width, self.vae_scale_factor())
        shape = (len(prompts), channels, h, w)
        if latents is None:
            latents = rng.standard_normal(shape).astype(np.float32)
        elif tuple(latents.shape) != shape:
            raise ConfigError(f"latents of shape {tuple(latents.shape)} given; this needs {shape}")
        latents = latents.astype(np.float32) * scheduler.init_noise_sigma
        learned = scheduler.config.get("variance_type") in ("learned", "learned_range")
        for t in self.steps(scheduler.timesteps):
            batch = np.concatenate([latents] * 2) if guided else latents
            feeds = {
                "sample": batch,
                "timestep": np.full(batch.shape[0], t, np.float32),
                "image_embeds": image_embeds,
            }
            predicted = self.run("unet/model", feeds, "out_sample")
            if guided:
                noise, variance = predicted[:, :channels], predicted[:, channels:]
                noise = guide(*np.split(noise, 2), scale)
                predicted = np.concatenate([noise, np.split(variance, 2)[1]], axis=1)
            if not learned:
                predicted = predicted[:, :channels]
            latents = scheduler.step(predicted, t, latents)
        return self.decode(latents)
