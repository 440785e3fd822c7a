"""Stable Diffusion 3 / 3.5: two CLIP encoders and T5, the MMDiT transformer, flow-matching steps."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide, is_listed, one_per_prompt
from mobius_diffusion.pipelines.flux import calculate_shift

#: What diffusers' SD3 pipeline takes for ``max_shift`` when the scheduler config lacks it.
SD3_MAX_SHIFT = 1.16


class StableDiffusion3Runner(PipelineRunner):
    """``StableDiffusion3Pipeline``: CLIP-L and CLIP-G penultimate states beside T5's, pooled texts, CFG.

    As diffusers: each CLIP encoder (no attention mask, both padded to the first
    tokenizer's length) gives ``penultimate_hidden_state`` and ``text_embeds``; the two
    states side by side are zero-padded to T5's width and put before T5's
    ``last_hidden_state`` (``max_sequence_length`` tokens, no mask) on the sequence
    axis; the pooled text is both ``text_embeds`` side by side. Without
    ``text_encoder_3`` (``null`` in ``model_index.json``) T5's rows are zeros of the
    transformer's ``joint_attention_dim``. Guidance always encodes the negative
    prompt ("" by default). ``prompt_2``/``prompt_3`` and ``negative_prompt_2``/``_3``
    feed the second CLIP and T5 (by default the first texts). Not offered:
    ``clip_skip``, skip-layer guidance, IP-Adapter images.
    """

    default_guidance_scale = 7.0

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        for encoder in ("text_encoder", "text_encoder_2"):
            if not is_listed(self.index, encoder):
                raise ConfigError(f"an SD3 pipeline without {encoder} (a CLIP encoder) is not run")

    def clip_length(self) -> int:
        """Both CLIP tokenizers pad to the first one's ``model_max_length``, as diffusers does."""
        return self.tokenizer("tokenizer").model_max_length

    def encode(
        self, texts: list[str], texts_2: list[str], texts_3: list[str], max_sequence_length: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(states [batch, clip + T5 tokens, width], pooled [batch, p1 + p2])`` for each encoder's texts."""
        names = ["penultimate_hidden_state", "text_embeds"]
        state_1, pooled_1 = self.clip_outputs(
            "tokenizer", "text_encoder", texts, self.clip_length(), names
        )
        state_2, pooled_2 = self.clip_outputs(
            "tokenizer_2", "text_encoder_2", texts_2, self.clip_length(), names
        )
        t5 = self.encode_t5(texts_3, max_sequence_length)
        clip = np.concatenate([state_1, state_2], axis=-1)
        if clip.shape[-1] > t5.shape[-1]:
            raise ConfigError(
                f"SD3 pads the CLIP states ({clip.shape[-1]} wide) to T5's width {t5.shape[-1]}; "
                "they are wider"
            )
        clip = np.pad(clip, [(0, 0), (0, 0), (0, t5.shape[-1] - clip.shape[-1])])
        states = np.concatenate([clip, t5], axis=1)
        return states, np.concatenate([pooled_1, pooled_2], axis=-1)

    def encode_t5(self, texts: list[str], max_sequence_length: int) -> np.ndarray:
        """T5's ``last_hidden_state`` (no mask), or zeros when the pipeline has no ``text_encoder_3``."""
        if not is_listed(self.index, "text_encoder_3"):
            width = self.config_int("transformer", "joint_attention_dim")
            return np.zeros((len(texts), max_sequence_length, width), dtype=np.float32)
        ids = self.tokenize("tokenizer_3", texts, max_sequence_length)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        return self.run("text_encoder_3/model", feeds, "last_hidden_state")

    def conditioning(
        self,
        prompts: list[str],
        guided: bool,
        max_sequence_length: int,
        *,
        prompt_2=None,
        prompt_3=None,
        negative_prompt=None,
        negative_prompt_2=None,
        negative_prompt_3=None,
    ) -> dict[str, np.ndarray]:
        """``encoder_hidden_states`` and ``pooled_projections``, negative rows first if guided."""
        batch = len(prompts)
        texts_2 = one_per_prompt(prompt_2, batch) if prompt_2 else prompts
        texts_3 = one_per_prompt(prompt_3, batch) if prompt_3 else prompts
        states, pooled = self.encode(prompts, texts_2, texts_3, max_sequence_length)
        if guided:
            negative = one_per_prompt(negative_prompt or "", batch)
            negative_2 = one_per_prompt(negative_prompt_2, batch) if negative_prompt_2 else negative
            negative_3 = one_per_prompt(negative_prompt_3, batch) if negative_prompt_3 else negative
            negative_states, negative_pooled = self.encode(
                negative, negative_2, negative_3, max_sequence_length
            )
            states = np.concatenate([negative_states, states])
            pooled = np.concatenate([negative_pooled, pooled])
        return {"encoder_hidden_states": states, "pooled_projections": pooled}

    def __call__(
        self,
        prompt: str | list[str],
        *,
        num_inference_steps: int = 28,
        guidance_scale: float | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        max_sequence_length: int = 256,
        **texts,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``latents`` [batch, channels, H/8, W/8] replaces the seeded noise (the flow
        starts from it unscaled). ``texts``: ``negative_prompt``, ``prompt_2``,
        ``prompt_3``, ``negative_prompt_2``, ``negative_prompt_3``.
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        factor, patch = self.vae_scale_factor(), self.config_int("transformer", "patch_size")
        height = height or self.config_int("transformer", "sample_size") * factor
        width = width or self.config_int("transformer", "sample_size") * factor
        if height % (factor * patch) or width % (factor * patch):
            raise ConfigError(f"SD3 image sides must be multiples of {factor * patch}")
        if guidance_scale is None:
            guidance_scale = self.default_guidance_scale
        guided = guidance_scale > 1
        conditioning = self.conditioning(prompts, guided, max_sequence_length, **texts)
        channels = self.config_int("transformer", "in_channels")
        shape = (len(prompts), channels, height // factor, width // factor)
        if latents is None:
            latents = self.initial_noise(shape, seed)
        latents = latents.astype(np.float32)

        scheduler = self.new_scheduler(seed)
        c = scheduler.config
        if c.get("use_dynamic_shifting"):
            tokens = (latents.shape[2] // patch) * (latents.shape[3] // patch)
            mu = calculate_shift(
                tokens,
                c.get("base_image_seq_len", 256),
                c.get("max_image_seq_len", 4096),
                c.get("base_shift", 0.5),
                c.get("max_shift", SD3_MAX_SHIFT),
            )
            scheduler.set_timesteps(num_inference_steps, mu=mu)
        else:
            scheduler.set_timesteps(num_inference_steps)
        for t in self.steps(scheduler.timesteps):
            model_input = np.concatenate([latents] * 2) if guided else latents
            timestep = np.full(model_input.shape[0], t, dtype=np.float32)
            feeds = {"hidden_states": model_input, "timestep": timestep, **conditioning}
            noise = self.run("transformer/model", feeds, "out_hidden_states")
            if guided:
                noise = guide(*np.split(noise, 2), guidance_scale)
            latents = scheduler.step(noise, t, latents)
        return self.decode(self.unscale_shifted_latents(latents))
