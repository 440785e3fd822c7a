"""Stable Video Diffusion: one image to a video, through CLIP's image embedding and the VAE's latents."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, read_json
from mobius_diffusion.pipelines.image_input import load_image, preprocess_image
from mobius_diffusion.schedulers.base import torch_linspace

F32 = np.float32
#: The CLIP image encoder's input size (fixed by the pipeline).
CLIP_SIZE = (224, 224)
#: CLIPImageProcessor's defaults (OpenAI CLIP's statistics), for a config without them.
CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)


def _gaussian(size: int, sigma: float) -> np.ndarray:
    """A normalised float32 Gaussian window of odd ``size``."""
    x = np.arange(size, dtype=F32) - F32(size // 2)
    weights = np.exp(-(x * x) / (F32(2) * F32(sigma) ** 2))
    return weights / weights.sum()


def _filter(images: np.ndarray, kernel: np.ndarray, axis: int) -> np.ndarray:
    """Cross-correlation of ``images`` with ``kernel`` along ``axis``, reflect-padded to its size."""
    half = len(kernel) // 2
    pads = [(0, 0)] * images.ndim
    pads[axis] = (half, half)
    padded = np.pad(images, pads, mode="reflect")
    size = images.shape[axis]
    out = np.zeros_like(images)
    for k, weight in enumerate(kernel):
        out += weight * np.take(padded, np.arange(k, k + size), axis=axis)
    return out


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    """torch's bicubic weights (``A = -0.75``) of the 4 taps around each fractional offset ``t``."""
    a = F32(-0.75)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    one, two = F32(1), F32(2)
    return np.stack([far(t + one), near(t), near(one - t), far(two - t)], axis=-1)


def _bicubic(images: np.ndarray, size: int, axis: int) -> np.ndarray:
    """``F.interpolate(mode="bicubic", align_corners=True)`` along one axis (taps clamped)."""
    n = images.shape[axis]
    scale = F32(n - 1) / F32(size - 1) if size > 1 else F32(0)
    real = scale * np.arange(size, dtype=F32)
    index = np.floor(real)
    weights = _cubic_weights((real - index).astype(F32))  # [size, 4]
    out = np.zeros(images.shape[:axis] + (size,) + images.shape[axis + 1 :], F32)
    shape = [1] * images.ndim
    shape[axis] = size
    for tap in range(4):
        taps = np.clip(index.astype(np.int64) - 1 + tap, 0, n - 1)
        out += weights[:, tap].reshape(shape) * np.take(images, taps, axis=axis)
    return out


def resize_with_antialiasing(images: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The SVD pipeline's ``_resize_with_antialiasing`` of ``[b, c, h, w]`` float32: a Gaussian
    blur as wide as the downscale (reflect padding), then bicubic with aligned corners."""
    h, w = images.shape[-2:]
    sigmas = (max((h / size[0] - 1.0) / 2.0, 0.001), max((w / size[1] - 1.0) / 2.0, 0.001))
    sizes = [int(max(2.0 * 2 * s, 3)) for s in sigmas]
    sizes = [k + 1 if k % 2 == 0 else k for k in sizes]  # odd
    blurred = _filter(images, _gaussian(sizes[1], sigmas[1]), axis=3)
    blurred = _filter(blurred, _gaussian(sizes[0], sigmas[0]), axis=2)
    return _bicubic(_bicubic(blurred, size[1], axis=3), size[0], axis=2)


class StableVideoDiffusionRunner(PipelineRunner):
    """``StableVideoDiffusionPipeline``: an image to a video ``[1, frames, H, W, 3]`` in [0, 1].

    As diffusers: the image, resized with antialiasing to 224 x 224 and normalised by
    ``feature_extractor``'s statistics, gives ``image_encoder``'s ``image_embeds``, the
    UNet's one-token context (zeros for the unguided half); the image at the video's
    size, plus ``noise_aug_strength`` times Gaussian noise, gives the VAE encoder's mode
    (unscaled), concatenated to every frame's latents (zeros unguided). The UNet also
    takes the added time ids (``fps - 1``, ``motion_bucket_id``, ``noise_aug_strength``).
    Guidance ramps linearly over the frames from ``min_guidance_scale`` (1) to
    ``guidance_scale`` (diffusers' ``max_guidance_scale``, 3); guided when it is above 1.
    The package's scheduler (the hub's Euler with Karras sigmas, v-prediction and
    timesteps ``log(sigma) / 4``) denoises; the VAE decodes ``decode_chunk_size`` frames at
    a time (each chunk one video to its temporal layers; all frames by default).
    """

    default_guidance_scale = 3.0
    default_height, default_width = 576, 1024
    #: ``mobius generate`` writes this runner's output as a video (``--frames``, ``--fps``).
    makes_video = True
    #: ... from ``--image`` (the conditioning frame).
    image_inputs = ("image",)
    #: The fps it conditions on, and writes at, by default (``--fps``).
    default_fps = 7

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        unet = self.config("unet")
        ids = self.config_int("unet", "projection_class_embeddings_input_dim")
        if ids != 3 * self.config_int("unet", "addition_time_embed_dim"):
            raise ConfigError(
                f"unet/config.json projection_class_embeddings_input_dim {ids} is not 3 "
                f"addition_time_embed_dim ids ({unet.get('addition_time_embed_dim')}): SVD "
                "passes fps, motion bucket and noise augmentation"
            )

    def clip_statistics(self) -> tuple[np.ndarray, np.ndarray]:
        """``image_mean`` and ``image_std`` of ``feature_extractor/``, shaped ``[1, 3, 1, 1]``."""
        path = self.package_dir / "feature_extractor" / "preprocessor_config.json"
        config = read_json(path) if path.is_file() else {}
        found = []
        for key, default in (("image_mean", CLIP_MEAN), ("image_std", CLIP_STD)):
            value = config.get(key, default)
            if not isinstance(value, list | tuple) or len(value) != 3:
                raise ConfigError(f"{path} {key} is {value!r}, not 3 numbers")
            found.append(np.asarray(value, F32).reshape(1, 3, 1, 1))
        return found[0], found[1]

    def encode_image(self, image, guided: bool) -> np.ndarray:
        """``image_embeds`` of the image as ``[rows, 1, dim]``, zeros first when guided."""
        pixels = np.asarray(image).astype(F32)[None].transpose(0, 3, 1, 2) / F32(255)
        pixels = resize_with_antialiasing(pixels * F32(2) - F32(1), CLIP_SIZE)
        mean, std = self.clip_statistics()
        pixels = ((pixels + F32(1)) / F32(2) - mean) / std
        embeds = self.run("image_encoder/model", {"pixel_values": pixels}, "image_embeds")
        embeds = embeds[:, None]
        return np.concatenate([np.zeros_like(embeds), embeds]) if guided else embeds

    def encode_latents(self, pixels: np.ndarray) -> np.ndarray:
        """The VAE encoder's mode of ``[1, 3, H, W]`` pixels, ``[1, latent_channels, h, w]``."""
        moments = self.run("vae/encoder/model", {"sample": pixels[:, :, None]}, "latent_parameters")
        mean, _ = np.split(moments[:, :, 0], 2, axis=1)
        return mean

    @staticmethod
    def augmentation_noise(shape: tuple[int, ...], seed: int | None) -> np.ndarray:
        """The noise added to the conditioning image: float32 standard normal, from a stream of
        its own (``numpy.random.default_rng([seed, 2])``)."""
        stream = None if seed is None else [seed, 2]
        return np.random.default_rng(stream).standard_normal(shape).astype(F32)

    def decode_frames(self, latents: np.ndarray, chunk: int) -> np.ndarray:
        """Frames ``[b, f, H, W, 3]`` in [0, 1] of ``[b, f, c, h, w]`` latents, ``chunk`` at a time."""
        b, f = latents.shape[:2]
        flat = latents.reshape(b * f, *latents.shape[2:]) / F32(
            self.config("vae").get("scaling_factor", 0.18215)
        )
        decoded = []
        for start in range(0, b * f, chunk):
            video = flat[start : start + chunk].transpose(1, 0, 2, 3)[None]  # [1, c, n, h, w]
            frames = self.run("vae/decoder/model", {"latent_sample": video}, "sample")
            decoded.append(frames[0].transpose(1, 0, 2, 3))  # [n, 3, H, W]
        frames = np.concatenate(decoded).reshape(b, f, *decoded[0].shape[1:])
        return np.clip(frames / 2 + 0.5, 0, 1).transpose(0, 1, 3, 4, 2)

    def __call__(
        self,
        image,
        *,
        prompt: str | None = None,
        height: int | None = None,
        width: int | None = None,
        num_frames: int | None = None,
        num_inference_steps: int = 25,
        guidance_scale: float | None = None,
        min_guidance_scale: float = 1.0,
        fps: int | None = None,
        motion_bucket_id: int = 127,
        noise_aug_strength: float = 0.02,
        decode_chunk_size: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
    ) -> np.ndarray:
        """Video frames ``[1, frames, H, W, 3]`` float32 in [0, 1] from ``image`` (a PIL image or file).

        ``latents`` [1, frames, latent_channels, H/8, W/8] replaces the seeded noise, as diffusers
        takes them. Defaults as diffusers': 576 x 1024, the UNet's ``num_frames``, fps 7.
        ``prompt`` is for ``mobius generate``'s PROMPT, which must be empty: SVD takes no text.
        """
        if prompt:
            raise ConfigError('a StableVideoDiffusionPipeline takes no prompt: give PROMPT ""')
        height, width = height or self.default_height, width or self.default_width
        if height % 8 or width % 8 or height < 8 or width < 8:
            raise ConfigError(f"SVD's height and width are multiples of 8, not {height} x {width}")
        num_frames = num_frames or self.config_int("unet", "num_frames", 25)
        chunk = decode_chunk_size or num_frames
        if num_frames < 1 or chunk < 1:
            raise ConfigError("num_frames and decode_chunk_size must be positive")
        fps = self.default_fps if fps is None else fps
        top = self.default_guidance_scale if guidance_scale is None else guidance_scale
        guided = top > 1
        image = load_image(image)

        embeds = self.encode_image(image, guided)
        pixels = preprocess_image(image, height, width)
        noise = self.augmentation_noise(pixels.shape, seed)
        image_latents = self.encode_latents(pixels + F32(noise_aug_strength) * noise)
        if guided:
            image_latents = np.concatenate([np.zeros_like(image_latents), image_latents])
        image_latents = np.repeat(image_latents[:, None], num_frames, axis=1)
        time_ids = np.asarray([[fps - 1, motion_bucket_id, noise_aug_strength]], F32)
        time_ids = np.concatenate([time_ids] * (2 if guided else 1))

        scheduler = self.new_scheduler(seed)
        scheduler.set_timesteps(num_inference_steps)
        scale = self.vae_scale_factor()
        channels = self.config_int("unet", "in_channels") // 2
        shape = (1, num_frames, channels, height // scale, width // scale)
        latents = self.given_or_initial_latents(latents, shape, seed)
        latents = (latents * F32(scheduler.init_noise_sigma)).astype(F32)
        ramp = torch_linspace(min_guidance_scale, top, num_frames).reshape(1, -1, 1, 1, 1)
        for t in self.steps(scheduler.timesteps):
            model_input = np.concatenate([latents] * 2) if guided else latents
            model_input = scheduler.scale_model_input(model_input, t)
            feeds = {
                "sample": np.concatenate([model_input, image_latents], axis=2),
                "timestep": np.full(model_input.shape[0], t, dtype=F32),
                "encoder_hidden_states": embeds,
                "added_time_ids": time_ids,
            }
            noise_pred = self.run("unet/model", feeds, "out_sample")
            if guided:
                uncond, cond = np.split(noise_pred, 2)
                noise_pred = uncond + ramp * (cond - uncond)
            latents = scheduler.step(noise_pred, t, latents)
        return self.decode_frames(latents, chunk)
