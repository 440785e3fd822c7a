"""Lumina Image 2.0: Gemma 2's penultimate states behind a system prompt, the Lumina 2 DiT, a shifted VAE."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide, one_per_prompt
from mobius_diffusion.pipelines.flux import calculate_shift

#: The system prompt diffusers' ``Lumina2Pipeline`` puts before each prompt by default.
SYSTEM_PROMPT = (
    "You are an assistant designed to generate superior images with the superior degree of "
    "image-text alignment based on textual prompts or user prompts."
)
#: diffusers' Lumina 2 pipeline takes 8 pixels per latent whatever the VAE (the hub's has 8).
VAE_SCALE_FACTOR = 8


def penultimate_state(runner: PipelineRunner) -> str:
    """The name of transformers' ``hidden_states[-2]`` among the outputs of ``runner``'s text encoder."""
    layers = runner.config_int("text_encoder", "num_hidden_layers")
    name = f"hidden_states.{layers - 1}"
    if name not in runner.outputs("text_encoder/model"):
        raise ConfigError(
            f"text_encoder/model.onnx has no output {name} (hidden_states[-2]): "
            "rebuild the pipeline whole, or its text encoder with --hidden-states -2"
        )
    return name


class Lumina2Runner(PipelineRunner):
    """``Lumina2Pipeline``: masked Gemma 2 ``hidden_states[-2]``, CFG with renormalization, flow matching.

    As diffusers: each prompt becomes ``system_prompt + " <Prompt Start> " + prompt``
    (:data:`SYSTEM_PROMPT` by default); it and the negative prompt ("" by default, no
    system prompt) are tokenized with right padding to ``max_sequence_length`` (256) and
    encoded with their masks; the transformer reads the text encoder's
    ``hidden_states.{n-1}`` (the whole-pipeline build adds it: ``--hidden-states -2``)
    with the mask. The transformer's timestep is ``1 - t / num_train_timesteps``, and its
    output is negated before the flow-matching step (Lumina's velocity points from noise
    to image).

    Guidance (``guidance_scale`` > 1): ``uncond + scale * (cond - uncond)``, rescaled
    (``cfg_normalization``, on by default) to the conditional prediction's norm over the
    last (width) axis, as diffusers; after the first ``cfg_trunc_ratio`` of the steps
    (1.0: never) only the conditional prediction is used. The sigmas are
    ``linspace(1, 1/steps, steps)``, shifted by the scheduler (its ``mu``, if dynamic,
    from ``latents.shape[1]`` as diffusers computes it). The VAE decodes
    ``latents / scaling_factor + shift_factor``.
    """

    default_guidance_scale = 4.0
    default_max_sequence_length = 256

    def vae_scale_factor(self) -> int:
        """8, as diffusers' Lumina 2 pipeline fixes it (latents are ``2 * (size // 16)``)."""
        return VAE_SCALE_FACTOR

    def encode(self, texts: list[str], max_sequence_length: int) -> tuple[np.ndarray, np.ndarray]:
        """``(hidden_states[-2], attention_mask int64)`` of ``texts``, as diffusers' ``_get_gemma_prompt_embeds``."""
        tokenizer = self.tokenizer("tokenizer")
        tokenizer.padding_side = "right"  # diffusers' pipeline sets it
        encoded = tokenizer(
            texts, padding="max_length", max_length=max_sequence_length, truncation=True
        )
        ids = np.asarray(encoded["input_ids"], dtype=np.int64)
        mask = np.asarray(encoded["attention_mask"], dtype=np.int64)
        return self.run(
            "text_encoder/model",
            {"input_ids": ids, "attention_mask": mask},
            penultimate_state(self),
        ), mask

    def denoise(self, latents, t, states, mask) -> np.ndarray:
        """The transformer's prediction for ``latents`` at scheduler timestep ``t``."""
        n = np.float32(self.scheduler_config.get("num_train_timesteps", 1000))
        timestep = np.full(latents.shape[0], np.float32(1) - np.float32(t) / n, np.float32)
        feeds = {
            "hidden_states": latents,
            "timestep": timestep,
            "encoder_hidden_states": states,
            "encoder_attention_mask": mask,
        }
        return self.run("transformer/model", feeds, "out_hidden_states")

    def __call__(
        self,
        prompt: str | list[str],
        *,
        negative_prompt: str | list[str] | None = None,
        num_inference_steps: int = 30,
        guidance_scale: float | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        max_sequence_length: int | None = None,
        system_prompt: str | None = None,
        cfg_trunc_ratio: float = 1.0,
        cfg_normalization: bool = True,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``height`` and ``width`` (multiples of 16) default to the transformer's
        ``sample_size`` times 8; ``latents`` [batch, channels, 2 * (H // 16), 2 * (W // 16)]
        replaces the seeded noise; see the class docstring for the rest.
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        sample_size = self.config_int("transformer", "sample_size")
        height = height or sample_size * VAE_SCALE_FACTOR
        width = width or sample_size * VAE_SCALE_FACTOR
        if height % 16 or width % 16:
            raise ConfigError(
                f"a Lumina 2 image is a multiple of 16 on each side, not {height} x {width}"
            )
        length = max_sequence_length or self.default_max_sequence_length
        if not 0 < length <= 512:
            raise ConfigError(f"max_sequence_length is {length}; Lumina 2 takes 1 to 512 tokens")
        if guidance_scale is None:
            guidance_scale = self.default_guidance_scale
        system = SYSTEM_PROMPT if system_prompt is None else system_prompt
        states, mask = self.encode([f"{system} <Prompt Start> {p}" for p in prompts], length)
        guided = guidance_scale > 1
        if guided:
            negative = self.encode(one_per_prompt(negative_prompt, len(prompts)), length)

        if latents is None:
            channels = self.config_int("transformer", "in_channels")
            shape = (len(prompts), channels, 2 * (height // 16), 2 * (width // 16))
            latents = self.initial_noise(shape, seed)
        latents = latents.astype(np.float32)
        scheduler = self.new_scheduler(seed)
        sigmas = np.linspace(1.0, 1 / num_inference_steps, num_inference_steps)
        # diffusers takes latents.shape[1] (the channels) as the image sequence length
        c = scheduler.config
        mu = calculate_shift(
            latents.shape[1],
            c.get("base_image_seq_len", 256),
            c.get("max_image_seq_len", 4096),
            c.get("base_shift", 0.5),
            c.get("max_shift", 1.15),
        )
        scheduler.set_timesteps(sigmas=sigmas, mu=mu)
        for i, t in enumerate(self.steps(scheduler.timesteps)):
            noise = self.denoise(latents, t, states, mask)
            if guided and (i + 1) / num_inference_steps <= cfg_trunc_ratio:
                cond, uncond = noise, self.denoise(latents, t, *negative)
                noise = guide(uncond, cond, guidance_scale)
                if cfg_normalization:
                    scale = np.linalg.norm(cond, axis=-1, keepdims=True)
                    noise = noise * (scale / np.linalg.norm(noise, axis=-1, keepdims=True))
            latents = scheduler.step(-noise, t, latents)
        return self.decode(self.unscale_shifted_latents(latents))
