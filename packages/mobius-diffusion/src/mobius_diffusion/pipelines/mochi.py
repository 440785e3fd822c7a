"""Mochi 1 text to video: masked T5 states, the asymmetric transformer, linear-quadratic sigmas."""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide, one_per_prompt

F32 = np.float32
#: The latent grid diffusers' MochiPipeline assumes: frames and pixels per latent.
TEMPORAL, SPATIAL = 6, 8
#: Where the linear-quadratic schedule's linear half ends (the pipeline's ``threshold_noise``).
THRESHOLD_NOISE = 0.025


def linear_quadratic_sigmas(steps: int, threshold: float = THRESHOLD_NOISE) -> list[float]:
    """Mochi's sigma schedule, from 1 down: ``1 - s`` with ``s`` rising linearly to ``threshold``
    over the first half of the steps, then on a parabola that meets the line there and ends
    at 1 one step past the last (Python floats, as the pipeline computes them)."""
    if steps < 2:  # the parabola needs a step on each side (diffusers divides by zero)
        raise ConfigError(f"a Mochi schedule takes at least 2 steps, not {steps}")
    linear = steps // 2
    rest = steps - linear
    # s(i) = a i^2 + b i + c on [linear, steps): s(linear) = threshold, s(steps) = 1, and
    # the slope at ``linear`` is the line's
    gap = linear - threshold * steps
    a = gap / (linear * rest**2)
    b = threshold / linear - 2 * gap / rest**2
    c = a * linear**2
    rising = [i * threshold / linear for i in range(linear)]
    rising += [a * i**2 + b * i + c for i in range(linear, steps)]
    return [1.0 - s for s in rising]


class MochiRunner(PipelineRunner):
    """``MochiPipeline``: a prompt to a video ``[batch, frames, H, W, 3]`` in [0, 1].

    As diffusers: each text is tokenized to ``max_sequence_length`` (256) tokens and
    encoded by T5 with its mask; states and mask both go to the transformer. With
    ``force_zeros_for_empty_prompt`` in ``model_index.json`` and the last text empty,
    every row's mask is zeros (the transformer then reads none of the states, so T5 is
    not run for them). The negative prompt (default "") guides with ``guidance_scale``
    4.5. The latent video ``[batch, C, (frames - 1) / 6 + 1, H / 8, W / 8]`` is
    denoised by ``transformer/model`` with flow-matching Euler over
    :func:`linear_quadratic_sigmas` (the hub's scheduler inverts them: ``invert_sigmas``),
    de-normalised with the VAE's ``latents_mean``/``latents_std`` and ``scaling_factor``
    and decoded by ``vae/decoder/model``.

    Unlike diffusers, a frame count or size it would round is refused, not rounded; so
    is a VAE whose compression is not the 6 frames and 8 pixels diffusers assumes.
    """

    default_guidance_scale = 4.5
    default_max_sequence_length = 256
    default_num_frames, default_height, default_width = 19, 480, 848
    #: ``mobius generate`` writes this runner's output as a video (``--frames``, ``--fps``).
    makes_video = True
    #: Mochi's examples write their videos at 30 frames a second.
    default_fps = 30

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        scheduler = self.scheduler_config.get("_class_name")
        if scheduler != "FlowMatchEulerDiscreteScheduler":
            raise ConfigError(
                f"a MochiPipeline runs FlowMatchEulerDiscreteScheduler (it passes sigmas), "
                f"not {scheduler}"
            )
        vae = self.config("vae")
        factors = tuple(
            math.prod(vae.get(key, default))
            for key, default in (
                ("temporal_expansions", [1, 2, 3]),
                ("spatial_expansions", [2] * 3),
            )
        )
        if factors != (TEMPORAL, SPATIAL):
            raise ConfigError(
                f"vae/config.json compresses {factors[0]} frames and {factors[1]} pixels a "
                f"latent; diffusers' MochiPipeline assumes {TEMPORAL} and {SPATIAL}"
            )
        zeros = self.index.get("force_zeros_for_empty_prompt", False)
        if not isinstance(zeros, bool):
            raise ConfigError(
                f"model_index.json force_zeros_for_empty_prompt is {zeros!r}, not a boolean"
            )
        self.force_zeros_for_empty_prompt = zeros

    def encode(self, texts: list[str], max_length: int) -> tuple[np.ndarray, np.ndarray]:
        """``(T5 last_hidden_state, attention_mask int64)`` of ``texts`` padded to ``max_length``."""
        if self.force_zeros_for_empty_prompt and texts[-1] == "":  # diffusers tests the last
            width = self.config_int("transformer", "text_embed_dim", 4096)
            return (
                np.zeros((len(texts), max_length, width), F32),
                np.zeros((len(texts), max_length), np.int64),
            )
        return self.encode_masked(texts, max_length)

    def latent_shape(self, batch: int, num_frames: int, height: int, width: int) -> tuple[int, ...]:
        """The initial latents' shape; a frame count or size diffusers would round is refused."""
        if num_frames < 1 or (num_frames - 1) % TEMPORAL:
            raise ConfigError(
                f"a Mochi video has {TEMPORAL}k+1 frames (1, {TEMPORAL + 1}, "
                f"{2 * TEMPORAL + 1}...), not {num_frames}"
            )
        multiple = SPATIAL * self.config_int("transformer", "patch_size", 2)
        if height < 1 or width < 1 or height % multiple or width % multiple:
            raise ConfigError(
                f"a Mochi video's height and width are multiples of {multiple}, "
                f"not {height} x {width}"
            )
        channels = self.config_int("transformer", "in_channels", 12)
        return (
            batch,
            channels,
            (num_frames - 1) // TEMPORAL + 1,
            height // SPATIAL,
            width // SPATIAL,
        )

    def decode_video(self, latents: np.ndarray) -> np.ndarray:
        """Frames ``[batch, frames, H, W, 3]`` in [0, 1] of the final latents (``output_type="np"``)."""
        vae, channels = self.config("vae"), latents.shape[1]
        scaling = F32(vae.get("scaling_factor", 1.0))
        mean, std = vae.get("latents_mean"), vae.get("latents_std")
        if mean is None or std is None:
            latents = latents / scaling
        else:
            for key, value in (("latents_mean", mean), ("latents_std", std)):
                if not isinstance(value, list) or len(value) != channels:
                    raise ConfigError(f"vae/config.json {key} is not a list of {channels} numbers")
            view = (1, channels, 1, 1, 1)
            mean = np.asarray(mean, F32).reshape(view)
            latents = latents * np.asarray(std, F32).reshape(view) / scaling + mean
        video = self.decode_latents(latents.astype(F32))
        return np.clip(video / 2 + 0.5, 0, 1).transpose(0, 2, 3, 4, 1)

    def __call__(
        self,
        prompt: str | list[str],
        *,
        negative_prompt: str | list[str] | None = None,
        num_inference_steps: int = 64,
        guidance_scale: float | None = None,
        num_frames: int | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        max_sequence_length: int | None = None,
    ) -> np.ndarray:
        """Video frames ``[batch, frames, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``latents`` [batch, C, latent_frames, H/8, W/8] replaces the seeded noise, as
        diffusers takes them; defaults: 19 frames of 480 x 848, 256 text tokens.
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        shape = self.latent_shape(
            len(prompts),
            num_frames or self.default_num_frames,
            height or self.default_height,
            width or self.default_width,
        )
        length = max_sequence_length or self.default_max_sequence_length
        scale = self.default_guidance_scale if guidance_scale is None else guidance_scale
        states, mask = self.encode(prompts, length)
        guided = scale > 1
        if guided:  # the negative prompts' rows first, as diffusers batches them
            negatives = self.encode(one_per_prompt(negative_prompt, len(prompts)), length)
            states, mask = (
                np.concatenate(pair) for pair in zip(negatives, (states, mask), strict=True)
            )

        scheduler = self.new_scheduler(seed)
        scheduler.set_timesteps(sigmas=linear_quadratic_sigmas(num_inference_steps))
        scheduler.set_begin_index(0)
        latents = self.given_or_initial_latents(latents, shape, seed)
        for t in self.steps(scheduler.timesteps):
            model_input = np.concatenate([latents] * 2) if guided else latents
            feeds = {
                "hidden_states": model_input,
                "encoder_hidden_states": states,
                "timestep": np.full(model_input.shape[0], t, dtype=F32),
                "encoder_attention_mask": mask,
            }
            noise = self.run("transformer/model", feeds, "out_hidden_states")
            if guided:
                noise = guide(*np.split(noise, 2), scale)
            latents = scheduler.step(noise, t, latents)
        return self.decode_video(latents)
