"""AuraFlow: UMT5 states zeroed past each text, the AuraFlow transformer with CFG, flow-matching steps."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide, one_per_prompt


class AuraFlowRunner(PipelineRunner):
    """``AuraFlowPipeline``: a prompt to images ``[batch, H, W, 3]`` in [0, 1].

    As diffusers: UMT5 encodes each text padded to ``max_sequence_length`` (256) with
    its attention mask, and its states past the text are zeroed; the negative prompt
    (default "") guides with ``guidance_scale`` 3.5. The latents
    ``[batch, in_channels, H/8, W/8]`` are denoised by ``transformer/model`` (timestep
    ``t / 1000``) with the package's scheduler, set to ``num_inference_steps`` without
    a resolution shift, then divided by the VAE's ``scaling_factor`` and decoded.
    """

    default_guidance_scale = 3.5
    default_size = 1024  # diffusers' AuraFlowPipeline defaults height and width to 1024

    def encode(self, texts: list[str], max_length: int) -> np.ndarray:
        """UMT5 ``last_hidden_state`` of ``texts`` padded to ``max_length``, zero past each text."""
        states, mask = self.encode_masked(texts, max_length)
        return states * mask[:, :, None].astype(np.float32)

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
        max_sequence_length: int = 256,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``latents`` [batch, channels, H/8, W/8] replaces the seeded noise, as diffusers
        takes them. Sides that are not multiples of twice the VAE's factor are refused.
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        factor = self.vae_scale_factor()
        height, width = height or self.default_size, width or self.default_size
        if height % (2 * factor) or width % (2 * factor):
            raise ConfigError(
                f"AuraFlow image sides are multiples of {2 * factor}, not {height} x {width}"
            )
        if guidance_scale is None:
            guidance_scale = self.default_guidance_scale
        guided = guidance_scale > 1
        texts = prompts
        if guided:  # negative rows first, as guide() takes them
            texts = one_per_prompt(negative_prompt, len(prompts)) + prompts
        states = self.encode(texts, max_sequence_length)
        channels = self.config_int("transformer", "in_channels")
        shape = (len(prompts), channels, height // factor, width // factor)
        latents = self.given_or_initial_latents(latents, shape, seed)

        scheduler = self.new_scheduler(seed)
        scheduler.set_timesteps(num_inference_steps)
        for t in self.steps(scheduler.timesteps):
            model_input = np.concatenate([latents] * 2) if guided else latents
            timestep = np.full(model_input.shape[0], t / 1000, dtype=np.float32)
            feeds = {
                "hidden_states": model_input,
                "timestep": timestep,
                "encoder_hidden_states": states,
            }
            noise = self.run("transformer/model", feeds, "out_hidden_states")
            if guided:
                noise = guide(*np.split(noise, 2), guidance_scale)
            latents = scheduler.step(noise, t, latents)
        return self.decode(self.unscale_latents(latents))
