"""Chroma: Flux's packed latents and shifted flow matching, T5 alone with its padding masked, true CFG."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import guide, one_per_prompt
from mobius_diffusion.pipelines.flux import FluxRunner, latent_image_ids, unpack_latents


class ChromaRunner(FluxRunner):
    """``ChromaPipeline``: Flux without CLIP or the guidance embedding, guided by a negative prompt.

    As diffusers: T5 encodes each text padded to ``max_sequence_length`` (512) with
    the tokenizer's attention mask; the transformer's ``attention_mask`` over
    ``[text, image]`` tokens keeps the text and its first padding token (Chroma's
    training kept one) and every image token. With ``guidance_scale`` > 1 (default
    5) the negative prompt ("" by default) is encoded the same way and the two
    predictions are mixed as classifier-free guidance (diffusers runs them one after
    the other; here they share one batch). Not offered: IP-Adapter images.
    """

    default_guidance_scale = 5.0

    def encode(self, texts: list[str], max_sequence_length: int):
        """``(T5 states [batch, seq, d], transformer text mask [batch, seq] float 0/1)``."""
        states, mask = self.encode_masked(texts, max_sequence_length)
        lengths = mask.sum(axis=1, keepdims=True)
        keep = np.arange(mask.shape[1])[None, :] <= lengths  # the text and one padding token
        return states, keep.astype(np.float32)

    def __call__(
        self,
        prompt: str | list[str],
        *,
        negative_prompt: str | list[str] | None = None,
        num_inference_steps: int = 35,
        guidance_scale: float | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        max_sequence_length: int = 512,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``latents`` may be given packed ([batch, tokens, 4C], as diffusers takes them)
        in place of the seeded noise; the default size is 128 latents a side.
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        height = height or 128 * self.vae_scale_factor()
        width = width or 128 * self.vae_scale_factor()
        if guidance_scale is None:
            guidance_scale = self.default_guidance_scale
        guided = guidance_scale > 1
        texts = prompts
        if guided:  # negative rows first, as guide() takes them
            texts = one_per_prompt(negative_prompt, len(prompts)) + prompts
        text, text_mask = self.encode(texts, max_sequence_length)
        grid_h, grid_w = self.latent_grid(height, width)
        if not grid_h or not grid_w:
            raise ConfigError(
                f"a {width} x {height} image is smaller than one packed token "
                f"({2 * self.vae_scale_factor()} pixels a side)"
            )
        latents = self.packed_latents(len(prompts), grid_h, grid_w, seed, latents)
        image_mask = np.ones((len(texts), latents.shape[1]), dtype=np.float32)
        scheduler = self.flow_scheduler(seed, num_inference_steps, latents.shape[1])
        feeds = {
            "encoder_hidden_states": text,
            "img_ids": latent_image_ids(grid_h // 2, grid_w // 2),
            "txt_ids": np.zeros((text.shape[1], 3), dtype=np.float32),
            "attention_mask": np.concatenate([text_mask, image_mask], axis=1),
        }
        for t in self.steps(scheduler.timesteps):
            model_input = np.concatenate([latents] * 2) if guided else latents
            timestep = np.full(model_input.shape[0], t, dtype=np.float32) / np.float32(1000)
            feeds.update(hidden_states=model_input, timestep=timestep)
            noise = self.run("transformer/model", feeds, "out_hidden_states")
            if guided:
                noise = guide(*np.split(noise, 2), guidance_scale)
            latents = scheduler.step(noise, t, latents)
        latents = unpack_latents(latents, grid_h, grid_w)
        return self.decode(self.unscale_shifted_latents(latents))
