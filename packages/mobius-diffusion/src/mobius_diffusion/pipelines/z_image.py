"""Z-Image text to image: Qwen3's ``hidden_states[-2]`` behind the chat template, each
caption's real tokens only, CFG with truncation and normalisation, flow matching."""

from __future__ import annotations

import numpy as np

from mobius.chat_template import render_chat_template
from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, one_per_prompt
from mobius_diffusion.pipelines.flux import calculate_shift
from mobius_diffusion.pipelines.lumina2 import penultimate_state


def packed_captions(states: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(states, mask)`` with each row's masked-in tokens moved to its front (wherever the
    tokenizer padded), the rest zero and masked out: diffusers' ``prompt_embeds[i][mask[i]]``
    as the transformer graph takes it."""
    packed, kept = np.zeros_like(states), np.zeros_like(mask)
    for i, row in enumerate(mask.astype(bool)):
        packed[i, : row.sum()] = states[i, row]
        kept[i, : row.sum()] = 1
    return packed, kept


def joined_captions(*captions: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(states, mask)`` pairs stacked in one batch, the shorter zero-padded and masked out."""
    length = max(states.shape[1] for states, _ in captions)
    states = [np.pad(s, [(0, 0), (0, length - s.shape[1]), (0, 0)]) for s, _ in captions]
    masks = [np.pad(m, [(0, 0), (0, length - m.shape[1])]) for _, m in captions]
    return np.concatenate(states), np.concatenate(masks)


def normalized_guidance(cond: np.ndarray, uncond: np.ndarray, scale: float, limit: float):
    """Z-Image's CFG, per image: ``cond + scale * (cond - uncond)``; with ``limit`` > 0, scaled
    down to at most ``limit`` times ``cond``'s norm (over the whole image)."""
    guided = cond + np.float32(scale) * (cond - uncond)
    if limit > 0:
        for i in range(len(guided)):
            most = np.linalg.norm(cond[i]) * np.float32(limit)
            norm = np.linalg.norm(guided[i])
            if norm > most:
                guided[i] = guided[i] * (most / norm)
    return guided


class ZImageRunner(PipelineRunner):
    """``ZImagePipeline`` (Z-Image, Z-Image-Turbo): a prompt to images ``[batch, H, W, 3]`` in [0, 1].

    As diffusers: each prompt goes into the tokenizer's chat template as the user's turn
    (a generation prompt, thinking on), padded to ``max_sequence_length`` (512) with a mask,
    and the Qwen3 text encoder's ``hidden_states[-2]`` (the whole-pipeline build adds
    ``hidden_states.{n-1}``) are kept for the masked-in tokens only: captions of their own
    lengths, which :func:`packed_captions` hands the transformer as one masked batch.
    ``transformer/model`` takes ``(1000 - t) / 1000`` and its output is negated before the
    flow-matching step. The sigmas are ``linspace(1, 1/steps, steps)``, shifted by the
    scheduler (``mu`` from the patch count when dynamic).

    Guidance runs when ``guidance_scale`` > 0 (Z-Image-Turbo takes 0): the negative prompt
    ("" by default) is encoded too, and each step predicts ``cond + scale * (cond -
    uncond)`` (:func:`normalized_guidance`; ``cfg_normalization`` caps its norm at that
    many times the conditional one's), except at steps whose ``(1000 - t) / 1000`` is above
    ``cfg_truncation``, which take ``cond`` alone. The VAE decodes ``latents /
    scaling_factor + shift_factor``. Unlike diffusers, a size it would refuse is refused
    before anything runs.
    """

    default_guidance_scale = 5.0
    default_max_sequence_length = 512
    default_size = 1024

    def encode(self, texts: list[str], max_sequence_length: int) -> tuple[np.ndarray, np.ndarray]:
        """``(states, mask)`` of ``texts``: each the user's turn, thinking on; real tokens packed."""
        tokenizer = self.tokenizer("tokenizer")
        if not tokenizer.chat_template:
            raise ConfigError("tokenizer/ has no chat template: the Z-Image prompt needs one")
        chats = [
            render_chat_template(
                tokenizer,
                [{"role": "user", "content": text}],
                source=self.package_dir / "tokenizer",
                add_generation_prompt=True,
                enable_thinking=True,
            )
            for text in texts
        ]
        encoded = tokenizer(
            chats, padding="max_length", max_length=max_sequence_length, truncation=True
        )
        ids = np.asarray(encoded["input_ids"], dtype=np.int64)
        mask = np.asarray(encoded["attention_mask"], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        return packed_captions(self.run("text_encoder/model", feeds, penultimate_state(self)), mask)

    def denoise(self, latents, t, states, mask) -> np.ndarray:
        """The transformer's output for ``latents`` at scheduler timestep ``t`` (not negated)."""
        timestep = (np.float32(1000) - np.float32(t)) / np.float32(1000)
        feeds = {
            "hidden_states": latents,
            "timestep": np.full(latents.shape[0], timestep, np.float32),
            "encoder_hidden_states": states,
            "encoder_attention_mask": mask,
        }
        return self.run("transformer/model", feeds, "out_hidden_states")

    def latent_grid(self, height: int, width: int) -> tuple[int, int]:
        """The latent rows and columns of an image (2 per 2x2 patch); a size diffusers refuses
        is refused, and a transformer the pipeline cannot call (patches other than 2x2)."""
        patches = self.config("transformer").get("all_patch_size", [2])
        if list(patches) != [2]:
            raise ConfigError(
                f"transformer/config.json all_patch_size {patches}: the Z-Image pipeline "
                "calls the transformer with 2x2 patches"
            )
        multiple = 2 * self.vae_scale_factor()
        if height < 1 or width < 1 or height % multiple or width % multiple:
            raise ConfigError(
                f"a Z-Image image's height and width are multiples of {multiple}, "
                f"not {height} x {width}"
            )
        return 2 * (height // multiple), 2 * (width // multiple)

    def __call__(
        self,
        prompt: str | list[str],
        *,
        negative_prompt: str | list[str] | None = None,
        num_inference_steps: int = 50,
        guidance_scale: float | None = None,
        cfg_normalization: bool | float = False,
        cfg_truncation: float = 1.0,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        max_sequence_length: int | None = None,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``height`` and ``width`` default to 1024; ``latents`` ``[batch, channels, 2 * (H //
        16), 2 * (W // 16)]`` (with the hub's VAE) replace the seeded noise; see the class
        docstring for guidance (``cfg_normalization``: a bool or the norm's limit).
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        rows, columns = self.latent_grid(height or self.default_size, width or self.default_size)
        length = max_sequence_length or self.default_max_sequence_length
        if length < 1:
            raise ConfigError(f"max_sequence_length is {length}; Z-Image takes at least 1 token")
        scale = self.default_guidance_scale if guidance_scale is None else guidance_scale
        guided = scale > 0
        captions = self.encode(prompts, length)
        if guided:  # one batch, the negative prompts' rows after the prompts', as diffusers
            negative = self.encode(one_per_prompt(negative_prompt, len(prompts)), length)
            both = joined_captions(captions, negative)

        channels = self.config_int("transformer", "in_channels")
        shape = (len(prompts), channels, rows, columns)
        latents = self.given_or_initial_latents(latents, shape, seed)
        scheduler = self.new_scheduler(seed)
        c = scheduler.config
        mu = calculate_shift(
            (rows // 2) * (columns // 2),
            c.get("base_image_seq_len", 256),
            c.get("max_image_seq_len", 4096),
            c.get("base_shift", 0.5),
            c.get("max_shift", 1.15),
        )
        sigmas = np.linspace(1.0, 1 / num_inference_steps, num_inference_steps)
        scheduler.set_timesteps(sigmas=sigmas, mu=mu)
        for t in self.steps(scheduler.timesteps):
            # diffusers compares the float32 (1000 - t) / 1000 as a Python float
            t_norm = float((np.float32(1000) - np.float32(t)) / np.float32(1000))
            if guided and t_norm <= cfg_truncation:
                twice = np.concatenate([latents, latents])
                cond, uncond = np.split(self.denoise(twice, t, *both), 2)
                noise = normalized_guidance(cond, uncond, scale, float(cfg_normalization))
            else:
                noise = self.denoise(latents, t, *captions)
            latents = scheduler.step(-noise, t, latents)
        return self.decode(self.unscale_shifted_latents(latents))
