"""Flux: CLIP pooled and T5 conditioning, packed latents, flow-matching steps with a resolution-dependent shift."""

from __future__ import annotations

import numpy as np

from mobius_diffusion.pipelines.base import PipelineRunner


def calculate_shift(
    image_seq_len: int,
    base_seq_len: int = 256,
    max_seq_len: int = 4096,
    base_shift: float = 0.5,
    max_shift: float = 1.15,
) -> float:
    """Flux's ``mu``: the time shift grows linearly with the number of image tokens."""
    m = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    b = base_shift - m * base_seq_len
    return image_seq_len * m + b


def pack_latents(latents: np.ndarray) -> np.ndarray:
    """[batch, C, H, W] -> [batch, (H/2)(W/2), 4C]: 2x2 patches as tokens."""
    b, c, h, w = latents.shape
    x = latents.reshape(b, c, h // 2, 2, w // 2, 2).transpose(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // 2) * (w // 2), c * 4)


def unpack_latents(latents: np.ndarray, height: int, width: int) -> np.ndarray:
    """The inverse of :func:`pack_latents` for a latent grid ``height`` x ``width``."""
    b, _, channels = latents.shape
    x = latents.reshape(b, height // 2, width // 2, channels // 4, 2, 2).transpose(0, 3, 1, 4, 2, 5)
    return x.reshape(b, channels // 4, height, width)


def latent_image_ids(height: int, width: int) -> np.ndarray:
    """[(height)(width), 3]: 0, row, column of each packed token."""
    ids = np.zeros((height, width, 3), dtype=np.float32)
    ids[..., 1] += np.arange(height)[:, None]
    ids[..., 2] += np.arange(width)[None, :]
    return ids.reshape(height * width, 3)


class FluxRunner(PipelineRunner):
    """``FluxPipeline``: CLIP pooled + T5 conditioning, packed latents, flow-matching Euler steps."""

    def encode(self, prompts: list[str], max_sequence_length: int):
        """``(T5 states [batch, seq, d], CLIP pooled [batch, d'])``, as diffusers feeds them (no masks)."""
        clip_length = self.tokenizer("tokenizer").model_max_length
        names = ["pooler_output"]
        (pooled,) = self.clip_outputs("tokenizer", "text_encoder", prompts, clip_length, names)
        ids = self.tokenize("tokenizer_2", prompts, max_sequence_length)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        return self.run("text_encoder_2/model", feeds, "last_hidden_state"), pooled

    def latent_grid(self, height: int, width: int) -> tuple[int, int]:
        """The latent grid of an image: its sides over the VAE's factor, rounded down to even."""
        factor = self.vae_scale_factor()
        return 2 * (height // (factor * 2)), 2 * (width // (factor * 2))

    def packed_latents(
        self, batch: int, grid_h: int, grid_w: int, seed: int | None, latents: np.ndarray | None
    ) -> np.ndarray:
        """The packed initial latents: ``latents`` as given, else seeded noise of the grid."""
        if latents is None:
            channels = self.config_int("transformer", "in_channels") // 4
            latents = pack_latents(self.initial_noise((batch, channels, grid_h, grid_w), seed))
        return latents.astype(np.float32)

    def flow_scheduler(self, seed: int | None, steps: int, tokens: int):
        """A fresh scheduler set to the Flux pipelines' sigmas, shifted for ``tokens`` generated tokens."""
        scheduler = self.new_scheduler(seed)
        c = scheduler.config
        mu = calculate_shift(
            tokens,
            c.get("base_image_seq_len", 256),
            c.get("max_image_seq_len", 4096),
            c.get("base_shift", 0.5),
            c.get("max_shift", 1.15),
        )
        scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
        return scheduler

    def __call__(
        self,
        prompt: str | list[str],
        *,
        num_inference_steps: int = 28,
        guidance_scale: float = 3.5,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        max_sequence_length: int = 512,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``latents`` may be given packed ([batch, tokens, 4C], as diffusers takes them)
        in place of the seeded noise; ``guidance_scale`` feeds the guidance embedding
        of a guidance-distilled transformer (FLUX.1-dev) and is unused otherwise.
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        height = height or 128 * self.vae_scale_factor()
        width = width or 128 * self.vae_scale_factor()
        text, pooled = self.encode(prompts, max_sequence_length)
        text_ids = np.zeros((text.shape[1], 3), dtype=np.float32)
        grid_h, grid_w = self.latent_grid(height, width)
        latents = self.packed_latents(len(prompts), grid_h, grid_w, seed, latents)
        image_ids = latent_image_ids(grid_h // 2, grid_w // 2)
        scheduler = self.flow_scheduler(seed, num_inference_steps, latents.shape[1])
        batch = latents.shape[0]
        feeds = {
            "encoder_hidden_states": text,
            "pooled_projections": pooled,
            "img_ids": image_ids,
            "txt_ids": text_ids,
            "guidance": np.full(batch, guidance_scale, dtype=np.float32),
        }
        if "guidance" not in self.graph_inputs("transformer/model"):
            del feeds["guidance"]
        for t in self.steps(scheduler.timesteps):
            timestep = np.full(batch, t, dtype=np.float32) / np.float32(1000)
            feeds.update(hidden_states=latents, timestep=timestep)
            noise = self.run("transformer/model", feeds, "out_hidden_states")
            latents = scheduler.step(noise, t, latents)
        latents = unpack_latents(latents, grid_h, grid_w)
        return self.decode(self.unscale_shifted_latents(latents))
