"""Latent consistency models: Stable Diffusion's text encoder and VAE, a UNet distilled to a
few steps that takes the guidance scale as an embedding (``timestep_cond``), LCM's scheduler."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner


def guidance_scale_embedding(w: np.ndarray, dim: int) -> np.ndarray:
    """The LCM pipelines' ``get_guidance_scale_embedding``: ``w`` [batch] -> float32 [batch, dim]
    (sin | cos of ``1000 w`` at ``dim // 2`` frequencies, zero-padded to an odd ``dim``)."""
    half = dim // 2
    step = np.float32(np.log(np.float32(10000)) / np.float32(half - 1))
    # float32 frequencies, each rounded once (torch's float32 exp may differ by an ulp)
    freqs = np.exp(np.arange(half) * -np.float64(step)).astype(np.float32)
    args = (np.asarray(w, np.float32) * np.float32(1000))[:, None] * freqs[None, :]
    emb = np.concatenate([np.sin(args), np.cos(args)], axis=1)
    return np.pad(emb, ((0, 0), (0, dim % 2))).astype(np.float32)


class LatentConsistencyModelRunner(PipelineRunner):
    """``LatentConsistencyModelPipeline``: CLIP states, no negative prompt, the guidance scale
    ``w`` fed as ``timestep_cond`` (``embedding(w - 1)``, the Imagen form diffusers uses); each
    ``LCMScheduler`` step predicts x0 and the last one is what the VAE decodes."""

    default_guidance_scale = 8.5

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        self.cond_dim = self.config_int("unet", "time_cond_proj_dim")

    def encode(self, prompts: list[str]) -> np.ndarray:
        """CLIP ``last_hidden_state`` of each prompt, padded to the tokenizer's length."""
        tokenizer = self.tokenizer("tokenizer")
        ids = self.tokenize("tokenizer", prompts, tokenizer.model_max_length)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        return self.run("text_encoder/model", feeds, "last_hidden_state")

    def __call__(
        self,
        prompt: str | list[str],
        *,
        num_inference_steps: int = 4,
        original_inference_steps: int | None = None,
        guidance_scale: float | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        negative_prompt: str | list[str] | None = None,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt``; ``latents``
        [batch, 4, H/8, W/8] replaces the seeded noise (before ``init_noise_sigma``)."""
        if negative_prompt:
            raise ConfigError(
                "a latent consistency model takes no negative prompt (it was distilled "
                "with guidance against the empty prompt)"
            )
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        unet = self.config("unet")
        factor = self.vae_scale_factor()
        height = height or unet["sample_size"] * factor
        width = width or unet["sample_size"] * factor
        scale = self.default_guidance_scale if guidance_scale is None else guidance_scale
        states = self.encode(prompts)
        scheduler = self.new_scheduler(seed)
        if not hasattr(scheduler, "boundary_scalings"):
            raise ConfigError(
                f"a latent consistency model steps with LCMScheduler, not "
                f"{self.scheduler_config.get('_class_name')}"
            )
        scheduler.set_timesteps(num_inference_steps, original_inference_steps)
        shape = (len(prompts), unet["in_channels"], height // factor, width // factor)
        if latents is None:
            latents = self.initial_noise(shape, seed)
        latents = (latents * np.float32(scheduler.init_noise_sigma)).astype(np.float32)
        w = np.full(len(prompts), scale - 1, dtype=np.float32)
        cond = guidance_scale_embedding(w, self.cond_dim)  # [batch, time_cond_proj_dim]
        for t in self.steps(scheduler.timesteps):
            timestep = np.full(len(prompts), t, dtype=np.float32)
            feeds = {"sample": latents, "timestep": timestep, "timestep_cond": cond}
            noise = self.run("unet/model", {**feeds, "encoder_hidden_states": states}, "out_sample")
            latents = scheduler.step(noise, t, latents)
        return self.decode(self.unscale_latents(scheduler.denoised))
