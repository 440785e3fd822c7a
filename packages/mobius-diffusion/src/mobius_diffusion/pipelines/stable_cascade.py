"""Stable Cascade: a text-conditioned prior (stage C) draws image embeddings, a decoder (stage B)
draws VQGAN latents under them, the Paella VQGAN (stage A) decodes those to pixels."""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, one_per_prompt, read_json
from mobius_diffusion.schedulers import load_scheduler

#: The prior pipeline's ``resolution_multiple`` and the decoder's ``latent_dim_scale`` as the
#: combined pipeline makes them (its defaults: neither is in ``model_index.json``).
RESOLUTION_MULTIPLE = 42.67
LATENT_DIM_SCALE = 10.67
SCHEDULER = "DDPMWuerstchenScheduler"


def lerp(start: np.ndarray, end: np.ndarray, weight: float) -> np.ndarray:
    """``torch.lerp``: from ``start`` the way torch computes it (from ``end`` for weights >= 0.5)."""
    w = np.float32(weight)
    if abs(weight) < 0.5:
        return start + w * (end - start)
    return end - (end - start) * (np.float32(1.0) - w)


def _rng(seed: int | None, stream: int) -> np.random.Generator:
    return np.random.default_rng(None if seed is None else [seed, stream])


class StableCascadeRunner(PipelineRunner):
    """``StableCascadeCombinedPipeline``, text to image.

    The prior (``prior_prior``) steps from noise of ``ceil(size / 42.67)`` under the prior
    text encoder's ``hidden_states[-1]`` (``last_layer_hidden_state``) and pooled
    ``text_embeds`` of the padded, masked prompt, and zero image embeddings; guided by
    ``guidance_scale`` (diffusers' ``prior_guidance_scale``, default 4) against the negative
    prompt, batched text first and combined with ``torch.lerp``. The decoder steps from
    noise of ``10.67`` times the prior's grid under its output (``effnet``) and the prior's
    pooled text, as the combined pipeline passes them (the decoder's own ``text_encoder`` is
    not run), guided by ``decoder_guidance_scale`` (default 0: none; zeros for ``effnet``
    and the negative prompt's pooled text). Both stages step with
    ``DDPMWuerstchenScheduler`` over every timestep but the last; the VQGAN decodes the
    latents times its ``scale_factor``, clamped to [0, 1]. ``prior_image_encoder`` (image
    prompts) is built with the package but this text-to-image runner does not read it.

    Noise of ``seed``: the prior's initial noise is :meth:`initial_noise`'s, its steps'
    ``default_rng([seed, 1])``, the decoder's initial noise ``[seed, 2]`` and its steps'
    ``[seed, 3]``.
    """

    default_guidance_scale = 4.0

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        self.prior_scheduler_config = read_json(
            self.package_dir / "prior_scheduler" / "scheduler_config.json"
        )
        for which, config in (
            ("prior_scheduler", self.prior_scheduler_config),
            ("scheduler", self.scheduler_config),
        ):
            if config.get("_class_name") != SCHEDULER:
                raise ConfigError(
                    f"Stable Cascade's {which} is a {config.get('_class_name')}; mobius runs its "
                    f"stages with {SCHEDULER} (the others condition on alphas mobius has not ported)"
                )
        if self.config("prior_prior").get("clip_text_in_channels") is None:
            raise ConfigError("prior_prior is no Stable Cascade prior: it maps no text states")
        if self.config("decoder").get("effnet_in_channels") is None:
            raise ConfigError("decoder is no Stable Cascade decoder: it maps no image embeddings")

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(hidden_states[-1] [b, seq, width], text_embeds [b, 1, projection])`` of the prior's
        text encoder on ``texts`` padded to the tokenizer's length, the mask fed with them."""
        tokenizer = self.tokenizer("prior_tokenizer")
        encoded = tokenizer(
            texts, padding="max_length", max_length=tokenizer.model_max_length, truncation=True
        )
        feeds = {k: np.asarray(encoded[k], dtype=np.int64) for k in ("input_ids", "attention_mask")}
        names = ["last_layer_hidden_state", "text_embeds"]
        states, pooled = self.run_outputs("prior_text_encoder/model", feeds, names)
        return states, pooled[:, None, :]

    def denoise(self, graph, scheduler, steps, latents, conditioning, scale, guided):
        """``latents`` stepped over every timestep but the last; the rows of ``conditioning``
        are the text's, then (``guided``) the negative's, combined by ``lerp`` at ``scale``."""
        scheduler.set_timesteps(steps)
        latents = (latents * np.float32(scheduler.init_noise_sigma)).astype(np.float32)
        for t in self.steps(scheduler.timesteps[:-1]):
            sample = np.concatenate([latents] * 2) if guided else latents
            ratio = np.full(sample.shape[0], t, dtype=np.float32)
            feeds = {"sample": sample, "timestep_ratio": ratio, **conditioning}
            predicted = self.run(graph, feeds, "out_sample")
            if guided:
                text, uncond = np.split(predicted, 2)
                predicted = lerp(uncond, text, scale)
            latents = scheduler.step(predicted, ratio[: len(latents)], latents)
        return latents

    def __call__(
        self,
        prompt: str | list[str],
        *,
        negative_prompt: str | list[str] | None = None,
        num_inference_steps: int = 12,
        prior_num_inference_steps: int = 60,
        guidance_scale: float | None = None,
        decoder_guidance_scale: float = 0.0,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        decoder_latents: np.ndarray | None = None,
    ) -> np.ndarray:
        """Images ``[batch, H, W, 3]`` float32 in [0, 1] for ``prompt`` (512 x 512 by default).

        ``num_inference_steps`` is the decoder's, ``prior_num_inference_steps`` the prior's;
        ``latents`` replaces the prior's initial noise and ``decoder_latents`` the decoder's
        (diffusers' decoder pipeline's ``latents``).
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        batch, height, width = len(prompts), height or 512, width or 512
        scale = self.default_guidance_scale if guidance_scale is None else guidance_scale
        guided, decoder_guided = scale > 1, decoder_guidance_scale > 1
        if decoder_guided and not guided:
            raise ConfigError(
                "decoder_guidance_scale > 1 guides the decoder with the prior's negative prompt, "
                "which an unguided prior (guidance scale <= 1) does not encode (nor does diffusers)"
            )
        states, pooled = self.encode(prompts)
        if guided:
            negative_states, negative_pooled = self.encode(one_per_prompt(negative_prompt, batch))

        prior = self.config("prior_prior")
        grid = (math.ceil(height / RESOLUTION_MULTIPLE), math.ceil(width / RESOLUTION_MULTIPLE))
        shape = (batch, prior["in_channels"], *grid)
        noise = self.given_or_initial_latents(latents, shape, seed)
        image = np.zeros((batch, 1, prior["clip_image_in_channels"]), np.float32)  # no image prompt
        conditioning = {"clip_text": states, "clip_text_pooled": pooled, "clip_img": image}
        if guided:
            negatives = {"clip_text": negative_states, "clip_text_pooled": negative_pooled}
            conditioning = {
                k: np.concatenate([v, negatives.get(k, np.zeros_like(v))])
                for k, v in conditioning.items()
            }
        scheduler = load_scheduler(self.prior_scheduler_config, generator=_rng(seed, 1))
        steps = prior_num_inference_steps
        embeddings = self.denoise(
            "prior_prior/model", scheduler, steps, noise, conditioning, scale, guided
        )

        decoder = self.config("decoder")
        shape = (batch, decoder["in_channels"], *(int(n * LATENT_DIM_SCALE) for n in grid))
        if decoder_latents is None:
            decoder_latents = _rng(seed, 2).standard_normal(shape).astype(np.float32)
        noise = self.given_or_initial_latents(decoder_latents, shape, seed)
        conditioning = {"clip_text_pooled": pooled, "effnet": embeddings}
        if decoder_guided:
            conditioning = {
                "clip_text_pooled": np.concatenate([pooled, negative_pooled]),
                "effnet": np.concatenate([embeddings, np.zeros_like(embeddings)]),
            }
        scheduler = load_scheduler(self.scheduler_config, generator=_rng(seed, 3))
        latents = self.denoise(
            "decoder/model", scheduler, num_inference_steps, noise, conditioning,
            decoder_guidance_scale, decoder_guided,
        )  # fmt: skip
        factor = np.float32(self.config("vqgan").get("scale_factor", 0.3764))
        image = self.run("vqgan/decoder/model", {"latent_sample": latents * factor}, "sample")
        return np.clip(image, 0, 1).transpose(0, 2, 3, 1)
