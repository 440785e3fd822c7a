"""PixArt-α and PixArt-Σ: masked T5 conditioning, the adaLN-single transformer, learned sigma, CFG."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide, one_per_prompt


class PixArtAlphaRunner(PipelineRunner):
    """``PixArtAlphaPipeline``: T5 states with their padding mask, size conditioning, CFG.

    As diffusers with ``clean_caption=False``: each text is lower-cased and stripped,
    padded to ``max_sequence_length`` T5 tokens (120), and encoded with its attention
    mask, which the transformer also takes; the negative prompt is "" by default. A
    size-conditioned transformer (PixArt-α 1024: ``resolution``/``aspect_ratio``
    inputs) gets the image's ``(height, width)`` and ``height / width``. With a learned
    sigma (``out_channels`` twice the latent channels) the variance half of the
    output is dropped before the scheduler step.

    Resolution binning (diffusers' default) is not offered: the image is made at the
    ``height`` and ``width`` asked for; give one of the model's trained sizes
    (1024 x 1024, 896 x 1152...) for the image the diffusers pipeline makes by binning.
    """

    default_guidance_scale = 4.5
    default_max_sequence_length = 120
    #: Whether the pipeline feeds a size-conditioned transformer its resolution (α does, Σ not).
    feeds_size = True
    #: PixArtAlphaPipeline keeps the scheduler's x0 prediction after a single step; not ported.
    min_steps = 2

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        sized = {"resolution", "aspect_ratio"} & self.graph_inputs("transformer/model")
        if sized and not self.feeds_size:
            raise ConfigError(
                f"a {self.index.get('_class_name')} passes no size conditioning; this transformer "
                "takes resolution and aspect_ratio (use_additional_conditions)"
            )

    def encode(self, texts: list[str], max_length: int) -> tuple[np.ndarray, np.ndarray]:
        """``(T5 last_hidden_state, attention_mask int64)`` of ``texts`` padded to ``max_length``."""
        texts = [text.lower().strip() for text in texts]  # diffusers without caption cleaning
        encoded = self.tokenizer("tokenizer")(
            texts, padding="max_length", max_length=max_length, truncation=True
        )
        ids = np.asarray(encoded["input_ids"], dtype=np.int64)
        mask = np.asarray(encoded["attention_mask"], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        return self.run("text_encoder/model", feeds, "last_hidden_state"), mask

    def size_conditioning(self, batch: int, height: int, width: int) -> dict[str, np.ndarray]:
        """``resolution`` [batch, 2] and ``aspect_ratio`` [batch, 1], if the transformer takes them."""
        if not {"resolution", "aspect_ratio"} <= self.graph_inputs("transformer/model"):
            return {}
        resolution = np.tile(np.asarray([height, width], dtype=np.float32), (batch, 1))
        aspect_ratio = np.full((batch, 1), height / width, dtype=np.float32)
        return {"resolution": resolution, "aspect_ratio": aspect_ratio}

    def __call__(
        self,
        prompt: str | list[str],
        *,
        negative_prompt: str | list[str] = "",
        num_inference_steps: int = 20,
        guidance_scale: float | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        max_sequence_length: int | None = None,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``latents`` [batch, channels, H/8, W/8] replaces the seeded noise (before the
        scheduler's ``init_noise_sigma`` scaling, as diffusers takes them);
        ``max_sequence_length`` defaults to the pipeline's (α 120, Σ 300).
        """
        if num_inference_steps < self.min_steps:
            raise ConfigError(
                f"a {self.index.get('_class_name')} is run with {self.min_steps} or more steps"
            )
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        factor, channels = self.vae_scale_factor(), self.config_int("transformer", "in_channels")
        height = height or self.config_int("transformer", "sample_size") * factor
        width = width or self.config_int("transformer", "sample_size") * factor
        if guidance_scale is None:
            guidance_scale = self.default_guidance_scale
        guided = guidance_scale > 1
        length = max_sequence_length or self.default_max_sequence_length
        states, mask = self.encode(prompts, length)
        if guided:
            negative, negative_mask = self.encode(
                one_per_prompt(negative_prompt, len(prompts)), length
            )
            states, mask = np.concatenate([negative, states]), np.concatenate([negative_mask, mask])
        feeds = {"encoder_hidden_states": states, "encoder_attention_mask": mask}
        feeds.update(self.size_conditioning(states.shape[0], height, width))

        scheduler = self.new_scheduler(seed)
        scheduler.set_timesteps(num_inference_steps)
        shape = (len(prompts), channels, height // factor, width // factor)
        if latents is None:
            latents = self.initial_noise(shape, seed)
        latents = (latents * np.float32(scheduler.init_noise_sigma)).astype(np.float32)
        learned_sigma = self.config_int("transformer", "out_channels", channels) // 2 == channels
        for t in self.steps(scheduler.timesteps):
            model_input = np.concatenate([latents] * 2) if guided else latents
            model_input = scheduler.scale_model_input(model_input, t)
            timestep = np.full(model_input.shape[0], t, dtype=np.float32)
            feeds.update(hidden_states=model_input, timestep=timestep)
            noise = self.run("transformer/model", feeds, "out_hidden_states")
            if guided:
                noise = guide(*np.split(noise, 2), guidance_scale)
            if learned_sigma:
                noise = noise[:, :channels]
            latents = scheduler.step(noise, t, latents)
        return self.decode(self.unscale_latents(latents))


class PixArtSigmaRunner(PixArtAlphaRunner):
    """``PixArtSigmaPipeline``: as PixArt-α with 300 T5 tokens and no size conditioning."""

    default_max_sequence_length = 300
    feeds_size = False
    min_steps = 1
