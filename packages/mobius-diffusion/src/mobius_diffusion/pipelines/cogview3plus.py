"""CogView3-Plus: T5 states, the DiT with size conditioning, CogVideoX's DDIM sampler."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide, one_per_prompt


class CogView3PlusRunner(PipelineRunner):
    """``CogView3PlusPipeline``: a prompt to images ``[batch, H, W, 3]`` in [0, 1].

    As diffusers: each text is T5-encoded padded to ``max_sequence_length`` (224)
    tokens with no attention mask. With ``guidance_scale`` above 1 (default 5) the
    unconditional rows are zeros when no negative prompt is given (diffusers'
    ``new_zeros``), else the negative prompts' states. The transformer takes
    ``original_size`` (default: the image size), ``target_size`` and
    ``crops_coords_top_left`` in pixels; the package's scheduler steps (the hub's
    CogVideoXDDIMScheduler; a stochastic one draws its noise from ``seed``), and the
    latents divided by the VAE's ``scaling_factor`` are decoded.
    """

    default_guidance_scale = 5.0
    default_max_sequence_length = 224

    def encode(self, texts: list[str], max_length: int) -> np.ndarray:
        """T5 ``last_hidden_state`` of ``texts`` padded to ``max_length``, unmasked as diffusers."""
        ids = self.tokenize("tokenizer", texts, max_length)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        return self.run("text_encoder/model", feeds, "last_hidden_state")

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
        max_sequence_length: int | None = None,
        original_size: tuple[int, int] | None = None,
        crops_coords_top_left: tuple[int, int] = (0, 0),
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``height`` and ``width`` default to the transformer's ``sample_size`` times the
        VAE's factor (multiples of the factor times the patch size; diffusers' check
        wants multiples of 8); ``latents`` [batch, channels, H / f, W / f] replaces the
        seeded noise; see the class docstring for the rest.
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        factor = self.vae_scale_factor()
        sample_size = self.config_int("transformer", "sample_size", 128)
        height, width = height or sample_size * factor, width or sample_size * factor
        multiple = np.lcm(8, factor * self.config_int("transformer", "patch_size", 2))
        if height < 1 or width < 1 or height % multiple or width % multiple:
            raise ConfigError(
                f"a CogView3-Plus image is a multiple of {multiple} on each side, "
                f"not {height} x {width}"
            )
        scale = self.default_guidance_scale if guidance_scale is None else guidance_scale
        length = max_sequence_length or self.default_max_sequence_length
        states, guided = self.encode(prompts, length), scale > 1
        if guided:
            negative = (
                np.zeros_like(states)
                if negative_prompt is None
                else self.encode(one_per_prompt(negative_prompt, len(prompts)), length)
            )
            states = np.concatenate([negative, states])

        channels = self.config_int("transformer", "in_channels")
        shape = (len(prompts), channels, height // factor, width // factor)
        scheduler = self.new_scheduler(seed)
        scheduler.set_timesteps(num_inference_steps)
        latents = self.given_or_initial_latents(latents, shape, seed)
        latents = (latents * np.float32(scheduler.init_noise_sigma)).astype(np.float32)
        rows = len(states)
        sizes = {
            "original_size": original_size or (height, width),
            "target_size": (height, width),
            "crop_coords": crops_coords_top_left,
        }
        feeds = {k: np.tile(np.asarray([v], np.float32), (rows, 1)) for k, v in sizes.items()}
        for t in self.steps(scheduler.timesteps):
            model_input = np.concatenate([latents] * 2) if guided else latents
            feeds.update(
                hidden_states=scheduler.scale_model_input(model_input, t),
                timestep=np.full(rows, t, np.float32),
                encoder_hidden_states=states,
            )
            noise = self.run("transformer/model", feeds, "out_hidden_states")
            if guided:
                noise = guide(*np.split(noise, 2), scale)
            latents = scheduler.step(noise, t, latents)
        return self.decode(self.unscale_latents(latents))
