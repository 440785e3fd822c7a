"""CogView4: GLM-4's penultimate states, the CogView4 DiT with size conditioning, flow matching shifted by image size."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide, one_per_prompt
from mobius_diffusion.pipelines.lumina2 import penultimate_state

#: diffusers pads CogView4's token ids (on the left) to a multiple of this.
TOKEN_MULTIPLE = 16


def cogview4_shift(image_seq_len: int, scheduler_config: dict) -> float:
    """diffusers' CogView4 ``calculate_shift``: ``mu = sqrt(tokens / base_image_seq_len) * max_shift + base_shift``."""
    base_len = scheduler_config.get("base_image_seq_len", 256)
    base_shift = scheduler_config.get("base_shift", 0.25)
    max_shift = scheduler_config.get("max_shift", 0.75)
    return (image_seq_len / base_len) ** 0.5 * max_shift + base_shift


class CogView4Runner(PipelineRunner):
    """``CogView4Pipeline``: GLM ``hidden_states[-2]`` without a mask, CFG, size conditioning, flow matching.

    As diffusers: each prompt (and the negative prompt, "" by default) is tokenized
    with the tokenizer's own padding side (GLM-4's: left) to the longest of its batch,
    truncated at ``max_sequence_length`` (1024), then pad ids are put before it up to a
    multiple of 16; the text encoder attends to every token, pads included (diffusers
    passes no mask), and the transformer reads its ``hidden_states.{n-1}`` (built by
    the whole-pipeline build's ``--hidden-states -2``). The conditional and
    unconditional predictions are separate runs (their lengths may differ).

    The timesteps are ``linspace(num_train_timesteps, 1, steps)`` truncated to integers
    and fed to the transformer as they are; the scheduler shifts only the sigmas
    (``timesteps / num_train_timesteps``), with ``mu`` from the number of image patches.
    The transformer takes ``original_size`` (default: the image size), ``target_size``
    and ``crops_coords_top_left`` in pixels. The VAE decodes ``latents / scaling_factor``.
    """

    default_guidance_scale = 5.0
    default_max_sequence_length = 1024

    def encode(self, texts: list[str], max_sequence_length: int) -> np.ndarray:
        """GLM's ``hidden_states[-2]`` of ``texts``, as diffusers' ``_get_glm_embeds``."""
        tokenizer = self.tokenizer("tokenizer")
        encoded = tokenizer(
            texts, padding="longest", max_length=max_sequence_length, truncation=True
        )
        ids = np.asarray(encoded["input_ids"], dtype=np.int64)
        pad = -ids.shape[1] % TOKEN_MULTIPLE
        if pad:
            if tokenizer.pad_token_id is None:
                raise ConfigError("the tokenizer of this CogView4 package has no pad token")
            ids = np.concatenate(
                [np.full((len(ids), pad), tokenizer.pad_token_id, np.int64), ids], 1
            )
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}  # pads attended: no mask
        return self.run("text_encoder/model", feeds, penultimate_state(self))

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

        ``height`` and ``width`` (multiples of 16) default to the transformer's
        ``sample_size`` times the VAE's factor; ``latents`` [batch, channels, H / f, W / f]
        replaces the seeded noise; see the class docstring for the rest.
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        factor = self.vae_scale_factor()
        sample_size = self.config_int("transformer", "sample_size")
        height, width = height or sample_size * factor, width or sample_size * factor
        if height % 16 or width % 16:
            raise ConfigError(
                f"a CogView4 image is a multiple of 16 on each side, not {height} x {width}"
            )
        if guidance_scale is None:
            guidance_scale = self.default_guidance_scale
        length = max_sequence_length or self.default_max_sequence_length
        states = self.encode(prompts, length)
        guided = guidance_scale > 1
        if guided:
            negative = self.encode(one_per_prompt(negative_prompt, len(prompts)), length)

        batch = len(prompts)
        if latents is None:
            channels = self.config_int("transformer", "in_channels")
            latents = self.initial_noise((batch, channels, height // factor, width // factor), seed)
        latents = latents.astype(np.float32)
        sizes = {
            "original_size": original_size or (height, width),
            "target_size": (height, width),
            "crop_coords": crops_coords_top_left,
        }
        feeds = {k: np.tile(np.asarray([v], np.float32), (batch, 1)) for k, v in sizes.items()}

        scheduler = self.new_scheduler(seed)
        n = scheduler.config["num_train_timesteps"]
        timesteps = np.linspace(n, 1.0, num_inference_steps).astype(np.int64).astype(np.float32)
        patch = self.config_int("transformer", "patch_size")
        image_seq_len = (height // factor) * (width // factor) // patch**2
        scheduler.set_timesteps(
            sigmas=timesteps / np.float32(n), mu=cogview4_shift(image_seq_len, scheduler.config)
        )
        # diffusers' set_timesteps(timesteps=, sigmas=) keeps the given timesteps as they are
        scheduler.timesteps = timesteps
        for t in self.steps(scheduler.timesteps):
            feeds.update(hidden_states=latents, timestep=np.full(batch, t, np.float32))
            noise = self.run(
                "transformer/model", {**feeds, "encoder_hidden_states": states}, "out_hidden_states"
            )
            if guided:
                uncond = self.run(
                    "transformer/model",
                    {**feeds, "encoder_hidden_states": negative},
                    "out_hidden_states",
                )
                noise = guide(uncond, noise, guidance_scale)
            latents = scheduler.step(noise, t, latents)
        return self.decode(self.unscale_latents(latents))
