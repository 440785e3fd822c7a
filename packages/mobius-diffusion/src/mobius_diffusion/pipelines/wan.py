"""Wan 2.1/2.2 text to video: UMT5 states zeroed past each prompt, the 3-D transformer(s), the causal video VAE."""

from __future__ import annotations

import html
import math
import re

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide, is_listed
from mobius_diffusion.pipelines.image_input import preprocess_image


def clean_prompt(text: str) -> str:
    """The Wan pipelines' ``prompt_clean`` without ftfy: HTML entities undone twice, whitespace runs
    made one space, the ends stripped (ftfy, when diffusers finds it, also mends mojibake)."""
    text = html.unescape(html.unescape(text)).strip()
    return re.sub(r"\s+", " ", text).strip()


class WanRunner(PipelineRunner):
    """``WanPipeline``: a prompt to a video ``[batch, frames, H, W, 3]`` in [0, 1].

    As diffusers: each text is encoded by UMT5 with its attention mask, padded to
    ``max_sequence_length`` (512) tokens, and its states past the text's length are
    zeroed; the negative prompt (default "") guides with ``guidance_scale`` 5. The
    latent video is ``[batch, z_dim, (frames - 1) / 4 + 1, H / 8, W / 8]`` (the VAE's
    temporal and spatial factors), denoised by ``transformer/model`` with the package's
    scheduler (the hub's UniPC with flow sigmas), de-normalised with the VAE's
    ``latents_mean``/``latents_std`` and decoded frame by frame by ``vae/decoder_step/model``.

    Wan 2.2 A14B has two experts: ``transformer`` for the timesteps at or above
    ``boundary_ratio * num_train_timesteps``, ``transformer_2`` below, guided by
    ``guidance_scale_2`` (by default ``guidance_scale``). Unlike diffusers, a frame count
    or size it would round is refused, not rounded.

    Wan 2.2 TI2V (``expand_timesteps`` in ``model_index.json``; one expert) gives the
    transformer a timestep per video token (1x2x2 patches). Given an ``image``, it runs as diffusers'
    ``WanImageToVideoPipeline`` runs that checkpoint: the image's normalised VAE latents
    replace the first latent frame before every step and at the end, and that frame's
    tokens get timestep 0.
    """

    default_guidance_scale = 5.0
    default_max_sequence_length = 512
    default_num_frames, default_height, default_width = 81, 480, 832
    #: ``mobius generate`` writes this runner's output as a video (``--frames``, ``--fps``).
    makes_video = True

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        expand = self.index.get("expand_timesteps", False)
        if not isinstance(expand, bool):
            raise ConfigError(f"model_index.json expand_timesteps is {expand!r}, not a boolean")
        self.expand_timesteps = expand
        if not is_listed(self.index, "transformer"):
            raise ConfigError(f"{self.package_dir}: a Wan package with no transformer")
        ratio = self.index.get("boundary_ratio")
        if ratio is not None and (
            isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio < 1
        ):
            raise ConfigError(f"model_index.json boundary_ratio is {ratio!r}, not in (0, 1)")
        if is_listed(self.index, "transformer_2") != (ratio is not None):
            raise ConfigError(
                f"{self.package_dir}: a Wan pipeline has a transformer_2 exactly when it has a "
                "boundary_ratio (Wan 2.2's second expert)"
            )
        self.boundary_ratio = ratio
        if expand and ratio is not None:  # no such checkpoint: nothing to check it against
            raise ConfigError(
                "a Wan pipeline with both expand_timesteps (Wan 2.2 TI2V) and two experts "
                "(boundary_ratio) is not run by mobius"
            )
        for expert in self.experts() if expand else ():
            patch = self.config(expert).get("patch_size")
            if patch != [1, 2, 2]:  # diffusers lays the timesteps out as mask[:, ::2, ::2]
                raise ConfigError(
                    f"{expert}/config.json patch_size is {patch!r}: Wan 2.2 TI2V's per-token "
                    "timesteps (expand_timesteps) are laid out for [1, 2, 2] patches"
                )

    @property
    def optional_image_inputs(self) -> tuple[str, ...]:
        """``--image`` is optional for Wan 2.2 TI2V (image to video), refused otherwise."""
        return ("image",) if self.expand_timesteps else ()

    def experts(self) -> tuple[str, ...]:
        """The denoisers: ``transformer``, and Wan 2.2's ``transformer_2``."""
        return ("transformer", "transformer_2")[: 1 + (self.boundary_ratio is not None)]

    def expert(self, t: float) -> str:
        """The expert that denoises at timestep ``t``: Wan 2.2 switches below its boundary."""
        if self.boundary_ratio is None:
            return "transformer"
        boundary = self.boundary_ratio * self.scheduler_config.get("num_train_timesteps", 1000)
        return "transformer" if t >= boundary else "transformer_2"

    def vae_factors(self) -> tuple[int, int]:
        """``(temporal, spatial)``: frames and pixels per latent, from ``temperal_downsample``
        (diffusers' spelling): 2 in time per true entry, 2 in space per entry, times the
        VAE's ``patch_size`` (Wan 2.2's) in space."""
        vae = self.config("vae")
        downsample = vae.get("temperal_downsample", [False, True, True])
        if not isinstance(downsample, list) or not all(isinstance(d, bool) for d in downsample):
            raise ConfigError(
                f"vae/config.json temperal_downsample is {downsample!r}, not booleans"
            )
        patch = vae.get("patch_size") or 1  # Wan 2.2's VAE folds p x p pixels into channels
        if isinstance(patch, bool) or not isinstance(patch, int) or patch < 1:
            raise ConfigError(f"vae/config.json patch_size is {patch!r}, not a positive integer")
        return 2 ** sum(downsample), 2 ** len(downsample) * patch

    def latent_statistics(self, channels: int) -> tuple[np.ndarray, np.ndarray]:
        """The VAE's ``latents_mean`` and ``latents_std``, shaped ``[1, channels, 1, 1, 1]``."""
        vae = self.config("vae")
        found = []
        for key in ("latents_mean", "latents_std"):
            value = vae.get(key)
            if (
                not isinstance(value, list)
                or len(value) != channels
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
            ):
                raise ConfigError(f"vae/config.json {key} is not a list of {channels} numbers")
            found.append(np.asarray(value, dtype=np.float32).reshape(1, channels, 1, 1, 1))
        return found[0], found[1]

    def encode(self, texts: list[str], max_length: int) -> np.ndarray:
        """UMT5 ``last_hidden_state`` of ``texts`` padded to ``max_length``, zero past each text."""
        encoded = self.tokenizer("tokenizer")(
            [clean_prompt(text) for text in texts],
            padding="max_length",
            max_length=max_length,
            truncation=True,
            add_special_tokens=True,
        )
        ids = np.asarray(encoded["input_ids"], dtype=np.int64)
        mask = np.asarray(encoded["attention_mask"], dtype=np.int64)
        states = self.run(
            "text_encoder/model", {"input_ids": ids, "attention_mask": mask}, "last_hidden_state"
        )
        lengths = (mask > 0).sum(axis=1)
        states[np.arange(max_length)[None, :] >= lengths[:, None]] = 0  # diffusers keeps u[:len]
        return states

    def latent_shape(self, batch: int, num_frames: int, height: int, width: int) -> tuple[int, ...]:
        """The initial latents' shape; a frame count or size the VAE and patches do not divide is refused."""
        temporal, spatial = self.vae_factors()
        if num_frames < 1 or (num_frames - 1) % temporal:
            raise ConfigError(
                f"a Wan video has {temporal}k+1 frames (1, {temporal + 1}, {2 * temporal + 1}...), "
                f"not {num_frames}"
            )
        patch = self.config("transformer").get("patch_size", [1, 2, 2])
        if (
            not isinstance(patch, list)
            or len(patch) != 3
            or not all(isinstance(p, int) and p > 0 for p in patch)
        ):
            raise ConfigError(
                f"transformer/config.json patch_size is {patch!r}, not 3 positive integers"
            )
        # diffusers' check_inputs wants multiples of 16 whatever the patches; patches divide them
        multiple_h, multiple_w = math.lcm(16, spatial * patch[1]), math.lcm(16, spatial * patch[2])
        if height < 1 or width < 1 or height % multiple_h or width % multiple_w:
            raise ConfigError(
                f"a Wan video's height and width are multiples of {multiple_h} and {multiple_w}, "
                f"not {height} x {width}"
            )
        channels = self.config_int("transformer", "in_channels")
        return (
            batch,
            channels,
            (num_frames - 1) // temporal + 1,
            height // spatial,
            width // spatial,
        )

    def encode_video(self, video: np.ndarray) -> np.ndarray:
        """Normalised latents ``[1, z_dim, latent_frames, h, w]`` of ``video`` ``[1, 3, frames,
        H, W]`` in [-1, 1]: ``vae/encoder/model``'s mean (diffusers' ``argmax``), less
        ``latents_mean``, over ``latents_std``."""
        moments = self.run("vae/encoder/model", {"sample": video}, "latent_parameters")
        z_dim = moments.shape[1] // 2
        mean, std = self.latent_statistics(z_dim)
        return ((moments[:, :z_dim] - mean) * (np.float32(1) / std)).astype(np.float32)

    def timestep(self, t: float, shape: tuple[int, ...], image_kept: bool) -> np.ndarray:
        """The transformer's ``timestep`` for the model input of ``shape``: ``[rows]`` of ``t``,
        or with ``expand_timesteps`` ``[rows, tokens]`` (diffusers' ``mask[:, ::2, ::2] * t``),
        0 on the first latent frame's tokens when it is the given image's."""
        rows, _, frames, height, width = shape
        if not self.expand_timesteps:
            return np.full(rows, t, dtype=np.float32)
        mask = np.ones((frames, height // 2, width // 2), np.float32)
        mask[0] = 0 if image_kept else 1
        return np.repeat((mask * np.float32(t)).reshape(1, -1), rows, axis=0)

    def decode_video(self, latents: np.ndarray) -> np.ndarray:
        """Frames ``[batch, frames, H, W, 3]`` in [0, 1] of de-normalised latents (``output_type="np"``)."""
        mean, std = self.latent_statistics(latents.shape[1])
        latents = (latents / (np.float32(1) / std) + mean).astype(np.float32)  # diffusers' order
        video = self.decode_latents(latents)
        return np.clip(video / 2 + 0.5, 0, 1).transpose(0, 2, 3, 4, 1)

    def __call__(
        self,
        prompt: str | list[str],
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
        image=None,
    ) -> np.ndarray:
        """Video frames ``[batch, frames, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``latents`` [batch, z_dim, latent_frames, H/8, W/8] replaces the seeded noise, as
        diffusers takes them; defaults: 81 frames of 480 x 832, 512 text tokens. ``image``
        (a PIL image or a file; Wan 2.2 TI2V only) is the first frame.
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        num_frames = num_frames or self.default_num_frames
        height, width = height or self.default_height, width or self.default_width
        shape = self.latent_shape(len(prompts), num_frames, height, width)
        first = None  # TI2V image to video: the image's latents, kept as the first latent frame
        if image is not None:
            if not self.expand_timesteps:
                raise ConfigError(
                    "a Wan text-to-video package starts from no image (Wan 2.2 TI2V's, with "
                    "expand_timesteps, does)"
                )
            first = self.encode_video(preprocess_image(image, height, width)[:, :, None])
            if first.shape[1] != shape[1]:
                raise ConfigError(
                    f"the VAE's {first.shape[1]} latent channels are not the transformer's "
                    f"in_channels {shape[1]}"
                )
        length = max_sequence_length or self.default_max_sequence_length
        states, guidance_scale, guided = self.guided_states(
            lambda texts: self.encode(texts, length), prompts, negative_prompt, guidance_scale
        )
        if guidance_scale_2 is not None and self.boundary_ratio is None:
            raise ConfigError("guidance_scale_2 guides Wan 2.2's second expert; this has one")
        scales = {"transformer": guidance_scale, "transformer_2": guidance_scale_2}
        if guidance_scale_2 is None:
            scales["transformer_2"] = guidance_scale

        scheduler = self.new_scheduler(seed)
        scheduler.set_timesteps(num_inference_steps)
        if latents is None:
            latents = self.initial_noise(shape, seed)
        elif tuple(latents.shape) != shape:
            raise ConfigError(
                f"latents of shape {tuple(latents.shape)} given; this video needs {shape}"
            )
        latents = latents.astype(np.float32)
        for t in self.steps(scheduler.timesteps):
            model_input = latents if first is None else _with_first_frame(latents, first)
            model_input = np.concatenate([model_input] * 2) if guided else model_input
            feeds = {
                "hidden_states": model_input,
                "timestep": self.timestep(t, model_input.shape, first is not None),
                "encoder_hidden_states": states,
            }
            expert = self.expert(t)
            noise = self.run(f"{expert}/model", feeds, "out_hidden_states")
            if guided:
                noise = guide(*np.split(noise, 2), scales[expert])
            latents = scheduler.step(noise, t, latents)
        if first is not None:
            latents = _with_first_frame(latents, first)
        return self.decode_video(latents)


def _with_first_frame(latents: np.ndarray, first: np.ndarray) -> np.ndarray:
    """``latents`` with their first latent frame replaced by ``first`` (diffusers'
    ``(1 - mask) * condition + mask * latents``, its mask 0 on that frame and 1 elsewhere)."""
    latents = latents.copy()
    latents[:, :, :1] = first
    return latents
