"""Wan image to video: the first frame (and the last, FLF2V) VAE-encoded beside a mask in the
transformer's channels, CLIP's image states (Wan 2.1), two experts split at a boundary timestep
(Wan 2.2 A14B), or the first latent frame kept under per-token timesteps (Wan 2.2 TI2V)."""

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

    First and last frame (``last_image``, Wan 2.1 FLF2V): the last frame ends the encoded
    video and its mask; a FLF2V transformer (``pos_embed_seq_len``) needs it and attends to
    both images' CLIP states. Wan 2.2 A14B takes it too; Wan 2.1's plain I2V transformer
    does not (diffusers' fails on it). Wan 2.2 TI2V (``expand_timesteps``) runs as
    :class:`WanRunner` with an image: no mask channels, no image states, no last frame.
    """

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)  # the experts, as Wan's text to video
        transformer = self.config("transformer")
        self.image_states = transformer.get("image_dim") is not None
        self.first_last = transformer.get("pos_embed_seq_len") is not None
        if self.image_states and not is_listed(self.index, "image_encoder"):
            raise ConfigError(
                "this Wan transformer takes image states, and there is no image_encoder"
            )
        if self.expand_timesteps and self.image_states:
            raise ConfigError(
                "a Wan transformer with image states under expand_timesteps (Wan 2.2 TI2V's "
                "per-token timesteps) is not run by mobius"
            )

    @property
    def image_inputs(self) -> tuple[str, ...]:
        """The images a call needs: the first frame, and a FLF2V transformer's last frame."""
        return ("image", "last_image") if self.first_last else ("image",)

    @property
    def optional_image_inputs(self) -> tuple[str, ...]:
        """Wan 2.2 A14B (no image states, no per-token timesteps) may end on a last frame."""
        return () if self.image_states or self.expand_timesteps else ("last_image",)

    def encode_image(self, images: list) -> np.ndarray:
        """``[len(images), tokens, image_dim]``: the CLIP vision tower's ``hidden_states[-2]``."""
        try:
            from mobius_vision.processing.classification import load_image_processor
        except ImportError:
            raise ConfigError(
                "a Wan image-to-video package's CLIP image processor needs mobius-vision "
                "(pip install mobius-vision)"
            ) from None
        processor = load_image_processor(self.package_dir / "image_processor")
        feeds = {"pixel_values": np.stack([processor(load_image(image)) for image in images])}
        return self.run("image_encoder/model", feeds, "penultimate_hidden_state")

    def condition(self, pixels: np.ndarray, num_frames: int, last=None) -> np.ndarray:
        """``[1, temporal + z_dim, latent_frames, h, w]``: the mask of the given frames, then
        the normalised latents of the image, zero frames and the ``last`` image if given."""
        temporal, _ = self.vae_factors()
        video = np.zeros((1, 3, num_frames, *pixels.shape[2:]), np.float32)
        video[:, :, 0] = pixels[:, :]
        given = np.zeros(temporal + num_frames - 1, np.float32)  # diffusers repeats frame 0
        given[:temporal] = 1  # the first latent frame holds the first frame alone
        if last is not None:
            video[:, :, -1] = last
            given[-1] = 1
        latents = self.encode_video(video)
        mask = given.reshape(-1, temporal).T[None, :, :, None, None]  # [1, temporal, frames, 1, 1]
        mask = np.broadcast_to(mask, (1, temporal, *latents.shape[2:]))
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
        last_image=None,
    ) -> np.ndarray:
        """Video frames ``[batch, frames, H, W, 3]`` float32 in [0, 1] starting from ``image``
        (a PIL image or a file) and ending on ``last_image`` if given. ``latents`` [batch,
        z_dim, latent_frames, H/8, W/8] replace the seeded noise, as diffusers takes them;
        defaults as :class:`WanRunner`'s."""
        accepted = (*self.image_inputs, *self.optional_image_inputs)
        if (last_image is None and self.first_last) or (
            last_image is not None and "last_image" not in accepted
        ):
            raise ConfigError(
                "a first-last-frame Wan transformer (FLF2V: pos_embed_seq_len) needs a "
                "last_image; Wan 2.2 A14B may take one; other Wan image-to-video models take none"
            )
        if self.expand_timesteps:  # Wan 2.2 TI2V: the first latent frame kept, no mask channels
            return super().__call__(
                prompt,
                image=image,
                negative_prompt=negative_prompt,
                num_inference_steps=num_inference_steps,
                guidance_scale=guidance_scale,
                guidance_scale_2=guidance_scale_2,
                num_frames=num_frames,
                height=height,
                width=width,
                seed=seed,
                latents=latents,
                max_sequence_length=max_sequence_length,
            )
        images = [image] if last_image is None else [image, last_image]
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        num_frames = num_frames or self.default_num_frames
        height, width = height or self.default_height, width or self.default_width
        batch, _, *grid = self.latent_shape(len(prompts), num_frames, height, width)
        if last_image is not None and num_frames < 2:
            raise ConfigError("a video from a first and a last frame has more than one frame")
        last = None if last_image is None else preprocess_image(last_image, height, width)
        condition = self.condition(preprocess_image(image, height, width), num_frames, last)
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
        if self.image_states:  # the image (FLF2V: both) for every row, the negative prompts' too
            feeds["encoder_hidden_states_image"] = np.tile(
                self.encode_image(images), (len(states), 1, 1)
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
