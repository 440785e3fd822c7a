"""Sana: Gemma 2 states behind a "complex human instruction", the linear-attention DiT, a DC-AE."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide, one_per_prompt
from mobius_diffusion.pipelines.resolution_bins import (
    BINS_BY_SAMPLE_SIZE,
    binned_size,
    resize_and_crop,
)

#: The instruction Sana's pipeline puts before each prompt by default (``complex_human_instruction``;
#: from the Sana app config): its lines joined by newlines, the lower-cased prompt right after.
COMPLEX_HUMAN_INSTRUCTION = (
    "Given a user prompt, generate an 'Enhanced prompt' that provides detailed visual "
    "descriptions suitable for image generation. Evaluate the level of detail in the user prompt:",
    "- If the prompt is simple, focus on adding specifics about colors, shapes, sizes, textures, "
    "and spatial relationships to create vivid and concrete scenes.",
    "- If the prompt is already detailed, refine and enhance the existing details slightly "
    "without overcomplicating.",
    "Here are examples of how to transform or refine prompts:",
    "- User Prompt: A cat sleeping -> Enhanced: A small, fluffy white cat curled up in a round "
    "shape, sleeping peacefully on a warm sunny windowsill, surrounded by pots of blooming red "
    "flowers.",
    "- User Prompt: A busy city street -> Enhanced: A bustling city street scene at dusk, "
    "featuring glowing street lamps, a diverse crowd of people in colorful clothing, and a "
    "double-decker bus passing by towering glass skyscrapers.",
    "Please generate only the enhanced description for the prompt below and avoid including any "
    "additional commentary or evaluations:",
    "User Prompt: ",
)


class SanaRunner(PipelineRunner):
    """``SanaPipeline``: masked Gemma 2 states, CFG, DPM-Solver++ over flow sigmas, DC-AE decode.

    As diffusers with ``clean_caption=False``: each prompt is lower-cased and stripped,
    the instruction (:data:`COMPLEX_HUMAN_INSTRUCTION`, or ``complex_human_instruction``;
    empty: none) put before it, and tokenized with right padding to the instruction's
    tokens plus ``max_sequence_length - 2``; of the text encoder's last state and the
    mask, token 0 and the last ``max_sequence_length - 1`` positions are kept. The
    negative prompt ("" by default) has no instruction and ``max_sequence_length``
    tokens. The transformer takes the states with their mask and the timestep times
    its ``timestep_scale``; with a learned sigma (``out_channels`` twice the latent
    channels) the variance half is dropped before the scheduler step. The latents are
    not scaled by the scheduler (diffusers' Sana does not), and the DC-AE decodes
    ``latents / scaling_factor``.

    Resolution binning as diffusers' (:mod:`mobius_diffusion.pipelines.resolution_bins`):
    the image is made at the trained size of the nearest aspect ratio, then resized and
    centre-cropped to the size asked for. By default (``use_resolution_binning=None``)
    it is on for the transformers diffusers has tables for (``sample_size`` 16, 32, 64,
    128: Sana 512 to 4K) and off for others; ``True`` refuses the others.
    """

    default_guidance_scale = 4.5
    default_max_sequence_length = 300

    def vae_scale_factor(self) -> int:
        """Pixels per latent on each side: 2 per DC-AE stage after the first (32 for Sana's)."""
        stages = self.config("vae").get("encoder_block_out_channels")
        if not isinstance(stages, list) or not stages:
            raise ConfigError(
                f"vae/config.json encoder_block_out_channels is {stages!r}, not a list of widths"
            )
        return 2 ** (len(stages) - 1)

    def timestep_scale(self) -> np.float32:
        """The transformer's ``timestep_scale`` (1 when absent), a positive number, checked."""
        value = self.config("transformer").get("timestep_scale", 1.0)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ConfigError(
                f"transformer/config.json timestep_scale is {value!r}, not a positive number"
            )
        return np.float32(value)

    def encode(
        self, texts: list[str], max_sequence_length: int, instruction: tuple[str, ...] | list[str]
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(Gemma 2 last_hidden_state, attention_mask int64)`` of ``texts``, as diffusers'
        ``_get_gemma_prompt_embeds`` (before the selection of :meth:`select`)."""
        tokenizer = self.tokenizer("tokenizer")
        tokenizer.padding_side = "right"
        texts = [text.lower().strip() for text in texts]  # diffusers without caption cleaning
        length = max_sequence_length
        if instruction:
            prefix = "\n".join(instruction)
            texts = [prefix + text for text in texts]
            length = len(tokenizer.encode(prefix)) + max_sequence_length - 2
        encoded = tokenizer(
            texts, padding="max_length", max_length=length, truncation=True, add_special_tokens=True
        )
        ids = np.asarray(encoded["input_ids"], dtype=np.int64)
        mask = np.asarray(encoded["attention_mask"], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        return self.run("text_encoder/model", feeds, "last_hidden_state"), mask

    @staticmethod
    def select(states: np.ndarray, mask: np.ndarray, max_sequence_length: int):
        """Token 0 and the last ``max_sequence_length - 1`` tokens (Sana paper, section 3.1)."""
        index = [0, *range(-max_sequence_length + 1, 0)]
        return states[:, index], mask[:, index]

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
        complex_human_instruction: tuple[str, ...] | list[str] | None = None,
        use_resolution_binning: bool | None = None,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``height`` and ``width`` default to the transformer's ``sample_size`` times the
        DC-AE's factor (1024 for Sana 1024); ``latents`` [batch, channels, H/f, W/f]
        replaces the seeded noise; ``max_sequence_length`` defaults to 300;
        ``complex_human_instruction`` to Sana's (an empty list: none);
        ``use_resolution_binning``: see the class docstring.
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        factor, channels = self.vae_scale_factor(), self.config_int("transformer", "in_channels")
        sample_size = self.config_int("transformer", "sample_size")
        height, width = height or sample_size * factor, width or sample_size * factor
        asked = (height, width)
        if use_resolution_binning is None:
            use_resolution_binning = sample_size in BINS_BY_SAMPLE_SIZE
        if use_resolution_binning:
            height, width = binned_size(height, width, sample_size)
        if height % 32 or width % 32:  # diffusers' rule, whatever the DC-AE's factor
            raise ConfigError(
                f"a Sana image is a multiple of 32 on each side, not {height} x {width}"
            )
        if guidance_scale is None:
            guidance_scale = self.default_guidance_scale
        if complex_human_instruction is None:
            complex_human_instruction = COMPLEX_HUMAN_INSTRUCTION
        guided = guidance_scale > 1
        length = max_sequence_length or self.default_max_sequence_length
        states, mask = self.select(*self.encode(prompts, length, complex_human_instruction), length)
        if guided:
            negative, negative_mask = self.encode(
                one_per_prompt(negative_prompt, len(prompts)), length, ()
            )
            states, mask = np.concatenate([negative, states]), np.concatenate([negative_mask, mask])
        feeds = {"encoder_hidden_states": states, "encoder_attention_mask": mask}

        scheduler = self.new_scheduler(seed)
        scheduler.set_timesteps(num_inference_steps)
        if latents is None:
            latents = self.initial_noise(
                (len(prompts), channels, height // factor, width // factor), seed
            )
        latents = latents.astype(np.float32)
        timestep_scale = self.timestep_scale()
        learned_sigma = self.config_int("transformer", "out_channels", channels) // 2 == channels
        for t in self.steps(scheduler.timesteps):
            model_input = np.concatenate([latents] * 2) if guided else latents
            timestep = np.full(model_input.shape[0], t, dtype=np.float32) * timestep_scale
            feeds.update(hidden_states=model_input, timestep=timestep)
            noise = self.run("transformer/model", feeds, "out_hidden_states")
            if guided:
                noise = guide(*np.split(noise, 2), guidance_scale)
            if learned_sigma:
                noise = noise[:, :channels]
            latents = scheduler.step(noise, t, latents)
        images = self.decode_latents(self.unscale_latents(latents))
        images = resize_and_crop(images, *asked)  # a binned image back to the size asked for
        return np.clip(images / 2 + 0.5, 0, 1).transpose(0, 2, 3, 1)
