"""Kandinsky 3 text to image: masked T5 states cut to the longest prompt, the Kandinsky 3 UNet
with guidance, DDPM steps, MoVQ."""

from __future__ import annotations

import numpy as np

from mobius_diffusion.pipelines.base import PipelineRunner, one_per_prompt
from mobius_diffusion.pipelines.kandinsky import downscale_height_and_width

#: diffusers' Kandinsky 3 pipeline pads (and truncates) every text to 128 T5 tokens.
MAX_LENGTH = 128
#: ... and sizes the latents for 8 pixels a latent, whatever MoVQ's levels.
LATENT_SCALE = 8


class Kandinsky3Runner(PipelineRunner):
    """``Kandinsky3Pipeline``: T5 states under their mask, CFG against zeros or a negative prompt.

    As diffusers (its ``cut_context``): each prompt is padded to 128 T5 tokens and
    encoded with its mask; the padding's states are zeroed, and the states and the mask
    are cut to the longest prompt's tokens plus one (a padding token, masked). A
    negative prompt is encoded alike and cut to the same length; without one the
    negative rows are zeros under an all-zero mask. With guidance (``guidance_scale`` >
    1, the negative rows first) the noise is ``(scale + 1) * cond - scale * uncond``.
    The latents are ``ceil(H / 64) * 8`` on each side (diffusers fixes the factor 8),
    stepped by DDPM (its noise seeded by ``seed``), and MoVQ decodes them unquantised.
    """

    default_guidance_scale = 3.0

    def decode_latents(self, latents: np.ndarray) -> np.ndarray:
        """MoVQ's decode, unquantised (``force_not_quantize``), as the pipeline calls it."""
        return self.run("movq/decoder/model", {"latent_sample": latents}, "sample")

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(T5 last_hidden_state, attention_mask)`` of ``texts``, the padding's states zeroed."""
        states, mask = self.encode_masked(texts, MAX_LENGTH)
        return states * mask[..., None].astype(np.float32), mask

    def prompt_states(self, prompts, negative_prompt, guided) -> tuple[np.ndarray, np.ndarray]:
        """The UNet's ``encoder_hidden_states`` and ``encoder_attention_mask`` (negative rows first)."""
        states, mask = self.encode(prompts)
        length = int(mask.sum(-1).max()) + 1  # the longest prompt and one masked token
        states, mask = states[:, :length], mask[:, :length]
        if not guided:
            return states, mask
        if negative_prompt is None:
            negative, negative_mask = np.zeros_like(states), np.zeros_like(mask)
        else:
            negative, negative_mask = self.encode(one_per_prompt(negative_prompt, len(prompts)))
            negative, negative_mask = negative[:, :length], negative_mask[:, :length]
        return np.concatenate([negative, states]), np.concatenate([negative_mask, mask])

    def __call__(
        self,
        prompt: str | list[str],
        *,
        negative_prompt: str | list[str] | None = None,
        num_inference_steps: int = 25,
        guidance_scale: float | None = None,
        height: int = 1024,
        width: int = 1024,
        seed: int | None = None,
        latents: np.ndarray | None = None,
    ) -> np.ndarray:
        """Images ``[batch, H', W', 3]`` float32 in [0, 1] for ``prompt``.

        The image is MoVQ's decode of ``ceil(H / 64) * 8`` x ``ceil(W / 64) * 8`` latents
        (``H' = H`` for a multiple of 64 and the hub's MoVQ); ``latents`` [batch,
        channels, that size] replaces the seeded noise; see the class docstring.
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        scale = self.default_guidance_scale if guidance_scale is None else guidance_scale
        guided = scale > 1
        states, mask = self.prompt_states(prompts, negative_prompt, guided)
        scheduler = self.new_scheduler(seed)
        scheduler.set_timesteps(num_inference_steps)
        h, w = downscale_height_and_width(height, width, LATENT_SCALE)
        shape = (len(prompts), self.config_int("unet", "in_channels", 4), h, w)
        latents = self.given_or_initial_latents(latents, shape, seed)
        latents = latents * np.float32(scheduler.init_noise_sigma)
        for t in self.steps(scheduler.timesteps):
            batch = np.concatenate([latents] * 2) if guided else latents
            feeds = {
                "sample": batch,
                "timestep": np.full(batch.shape[0], t, np.float32),
                "encoder_hidden_states": states,
                "encoder_attention_mask": mask,
            }
            noise = self.run("unet/model", feeds, "out_sample")
            if guided:
                uncond, cond = np.split(noise, 2)
                noise = np.float32(scale + 1) * cond - np.float32(scale) * uncond
            latents = scheduler.step(noise, t, latents)
        return self.decode(latents)
