"""Wan image to video: the first frame VAE-encoded beside a mask in the transformer's channels,
CLIP's image states (Wan 2.1), or two experts split at a boundary timestep (Wan 2.2)."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import guide, is_listed
from mobius_diffusion.pipelines.image_input import load_image, preprocess_image
from mobius_diffusion.pipelines.wan import WanRunner


class WanImageToVideoRunner(WanRunner):
    """``WanImageToVideoPipeline``: an image and a prompt to a video ``[batch, frames, H, W, 3]``.

    As diffusers: the image, resized to the video's size, is the first of ``num_frames``
    frames (the rest zeros) that ``vae/encoder/model`` encodes (the mean, normalised by
    ``latents_mean``/``latents_std``); a mask (ones on the first latent frame, one channel
    per frame the VAE folds into it) goes before it, and both after the noisy latents in
    the transformer's channels. Wan 2.1's transformer also attends to the image's CLIP
    states (``image_encoder/model``'s ``penultimate_hidden_state``, transformers'
    ``hidden_states[-2]``, of the image as ``image_processor/`` prepares it: Pillow's
    resampling, as transformers' PIL processor, so needs mobius-vision). Wan 2.2 A14B has
    no image encoder and two experts: ``transformer`` for the timesteps at or above
    ``boundary_ratio * num_train_timesteps``, ``transformer_2`` with ``guidance_scale_2``
    (by default ``guidance_scale``) below. The text, scheduler and decoding are
    :class:`WanRunner`'s.

    Refused by name: Wan 2.2 TI2V's ``expand_timesteps`` and a first-last-frame
    transformer (``pos_embed_seq_len``), which this runner does not run yet.
    """

    image_inputs = ("image",)

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)  # the experts, as Wan's text to video
        transformer = self.config("transformer")
        if transformer.get("pos_embed_seq_len") is not None:
            raise ConfigError(
                "a first-last-frame Wan transformer (pos_embed_seq_len) is not run by mobius yet"
            )
        self.image_states = transformer.get("image_dim") is not None
        if self.image_states and not is_listed(self.index, "image_encoder"):
            raise ConfigError(
                "this Wan transformer takes image states, and there is no image_encoder"
            )

    def encode_image(self, image) -> np.ndarray:
        """``[1, tokens, image_dim]``: the CLIP vision tower's ``hidden_states[-2]`` of ``image``."""
        try:
            from mobius_vision.processing.classification import load_image_processor
        except ImportError:
            raise ConfigError(
                "a Wan image-to-video package's CLIP image processor needs mobius-vision "
                "(pip install mobius-vision)"
            ) from None
        pixels = load_image_processor(self.package_dir / "image_processor")(load_image(image))
        feeds = {"pixel_values": pixels[None]}
        return self.run("image_encoder/model", feeds, "penultimate_hidden_state")

    def condition(self, pixels: np.ndarray, num_frames: int) -> np.ndarray:
        """``[1, temporal + z_dim, latent_frames, h, w]``: the first-frame mask, then the
        normalised latents of the image followed by ``num_frames - 1`` zero frames."""
        temporal, _ = self.vae_factors()
        video = np.zeros((1, 3, num_frames, *pixels.shape[2:]), np.float32)
        video[:, :, 0] = pixels[:, :]
        moments = self.run("vae/encoder/model", {"sample": video}, "latent_parameters")
        z_dim = moments.shape[1] // 2
        mean, std = self.latent_statistics(z_dim)
        latents = ((moments[:, :z_dim] - mean) * (np.float32(1) / std)).astype(np.float32)
        mask = np.zeros((1, temporal, *latents.shape[2:]), np.float32)
        mask[:, :, 0] = 1  # the given frame; the first latent frame holds it alone
        return np.concatenate([mask, latents], axis=1)

    def __call__(
        self,
        prompt: str | list[str],
        image,
        *,
        negative_prompt: str | list[str] | None = None,
        num_inference_steps: int = 50,
        guidance_scale: float | None = None,
        guidance_scale_2: float | None = None,
        num_frames: int | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        max_sequence_length: int | None = None,
    ) -> np.ndarray:
        """Video frames ``[batch, frames, H, W, 3]`` float32 in [0, 1] starting from ``image``
        (a PIL image or a file). ``latents`` [batch, z_dim, latent_frames, H/8, W/8] replace
        the seeded noise, as diffusers takes them; defaults as :class:`WanRunner`'s."""
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        num_frames = num_frames or self.default_num_frames
        height, width = height or self.default_height, width or self.default_width
        batch, _, *grid = self.latent_shape(len(prompts), num_frames, height, width)
        condition = self.condition(preprocess_image(image, height, width), num_frames)
        z_dim = condition.shape[1] - self.vae_factors()[0]
        for expert in self.experts():
            if self.config_int(expert, "in_channels") != z_dim + condition.shape[1]:
                raise ConfigError(
                    f"{expert}/config.json in_channels is not the latents', the mask's and the "
                    f"image's channels ({z_dim} + {condition.shape[1]})"
                )
        length = max_sequence_length or self.default_max_sequence_length
        if self.image_states and length != 512:  # where diffusers' attention cuts image from text
            raise ConfigError(f"Wan 2.1 image to video reads 512 text tokens, not {length}")
        states, scale, guided = self.guided_states(
            lambda texts: self.encode(texts, length), prompts, negative_prompt, guidance_scale
        )
        scale_2 = scale if guidance_scale_2 is None else guidance_scale_2
        scales = {"transformer": scale, "transformer_2": scale_2}
        feeds = {"encoder_hidden_states": states}
        if self.image_states:  # one image for every row, the negative prompts' too
            feeds["encoder_hidden_states_image"] = np.repeat(
                self.encode_image(image), len(states), axis=0
            )

        scheduler = self.new_scheduler(seed)
        scheduler.set_timesteps(num_inference_steps)
        latents = self.given_or_initial_latents(latents, (batch, z_dim, *grid), seed)
        condition = np.repeat(condition, batch, axis=0)
        for t in self.steps(scheduler.timesteps):
            expert = self.expert(t)
            model_input = np.concatenate([latents, condition], axis=1)
            if guided:
                model_input = np.concatenate([model_input] * 2)
            timestep = np.full(model_input.shape[0], t, dtype=np.float32)
            step_feeds = {"hidden_states": model_input, "timestep": timestep, **feeds}
            noise = self.run(f"{expert}/model", step_feeds, "out_hidden_states")
            if guided:
                noise = guide(*np.split(noise, 2), scales[expert])
            latents = scheduler.step(noise, t, latents)
        return self.decode_video(latents)
