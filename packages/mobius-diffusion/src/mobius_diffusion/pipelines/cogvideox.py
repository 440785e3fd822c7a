"""CogVideoX 1.0 and 1.5 text to video: T5 states, the 3-D transformer with its rotary tables, the causal VAE."""

from __future__ import annotations

import math

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide
from mobius_diffusion.schedulers import torch_linspace


def rotary_1d(
    dim: int, positions: np.ndarray, theta: float = 10000.0
) -> tuple[np.ndarray, np.ndarray]:
    """diffusers' ``get_1d_rotary_pos_embed(use_real=True)`` in float32: ``(cos, sin)`` [positions, dim],
    each frequency repeated for the pair of adjacent channels it rotates."""
    exponents = np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)
    frequencies = np.float32(1.0) / np.power(np.float32(theta), exponents)
    angles = np.outer(positions.astype(np.float32), frequencies).astype(np.float32)
    return np.repeat(np.cos(angles), 2, axis=1), np.repeat(np.sin(angles), 2, axis=1)


def resize_crop_region(grid: tuple[int, int], width: int, height: int) -> tuple[tuple, tuple]:
    """diffusers' ``get_resize_crop_region_for_grid``: the ``grid`` (h, w) fitted into the
    ``height`` x ``width`` base grid, centred: ``((top, left), (bottom, right))``."""
    h, w = grid
    if h / w > height / width:
        resized_h, resized_w = height, int(round(height / h * w))
    else:
        resized_w, resized_h = width, int(round(width / w * h))
    top, left = int(round((height - resized_h) / 2.0)), int(round((width - resized_w) / 2.0))
    return (top, left), (top + resized_h, left + resized_w)


def rotary_3d(
    head_dim: int,
    grid: tuple[int, int],
    frames: int,
    crops: tuple[tuple, tuple] | None = None,
    max_size: tuple[int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """diffusers' ``get_3d_rotary_pos_embed``: ``(cos, sin)`` [frames * h * w, head_dim].

    A quarter of the channels rotate with time, three eighths each with height and
    width. Positions are a linspace over ``crops`` (1.0) or, given ``max_size``
    (1.5's ``grid_type="slice"``), the first integers."""
    h, w = grid
    if max_size is None:
        (top, left), (bottom, right) = crops
        grid_h = torch_linspace(top, bottom * (h - 1) / h, h)
        grid_w = torch_linspace(left, right * (w - 1) / w, w)
        grid_t = torch_linspace(0, frames * (frames - 1) / frames, frames)
    else:
        grid_h = np.arange(max_size[0], dtype=np.float32)[:h]
        grid_w = np.arange(max_size[1], dtype=np.float32)[:w]
        grid_t = np.arange(frames, dtype=np.float32)
    axes = [
        rotary_1d(head_dim // 4, grid_t),
        rotary_1d(head_dim // 8 * 3, grid_h),
        rotary_1d(head_dim // 8 * 3, grid_w),
    ]

    def combined(part: int) -> np.ndarray:
        t, y, x = (axis[part] for axis in axes)
        shape = (frames, h, w)
        table = np.concatenate(
            [
                np.broadcast_to(t[:, None, None, :], (*shape, t.shape[1])),
                np.broadcast_to(y[None, :, None, :], (*shape, y.shape[1])),
                np.broadcast_to(x[None, None, :, :], (*shape, x.shape[1])),
            ],
            axis=-1,
        )
        return table.reshape(frames * h * w, -1)

    return combined(0), combined(1)


def dynamic_guidance(scale: float, t: int, steps: int) -> float:
    """``use_dynamic_cfg``: the guidance scale grows from 1 as the timestep falls (diffusers' cosine)."""
    return 1 + scale * ((1 - math.cos(math.pi * ((steps - t) / steps) ** 5.0)) / 2)


class CogVideoXRunner(PipelineRunner):
    """``CogVideoXPipeline``: a prompt to a video ``[batch, frames, H, W, 3]`` in [0, 1].

    As diffusers: each text is T5-encoded padded to ``max_sequence_length`` (226) tokens
    with no attention mask; the negative prompt (default "") guides with
    ``guidance_scale`` 6 (``use_dynamic_cfg`` raises it from 1 on a cosine as the steps
    go). The latents are ``[batch, (frames - 1) / 4 + 1, C, H / 8, W / 8]``; CogVideoX
    1.5 (``patch_size_t``) pads them in front to whole frame patches and drops the
    padding before decoding. With ``use_rotary_positional_embeddings`` the transformer
    takes the pipeline's rotary tables (computed here in numpy). The package's
    scheduler steps (the hub's CogVideoXDDIMScheduler for 2B, CogVideoXDPMScheduler for
    5B and 1.5, whose step noise comes from ``seed``); the latents divided by the VAE's
    ``scaling_factor`` are decoded by ``vae/decoder/model``.

    Unlike diffusers, a frame count or size it would round is refused, and so is an
    image-to-video transformer (``ofs_embed_dim``).
    """

    default_guidance_scale = 6.0
    default_max_sequence_length = 226
    #: ``mobius generate`` writes this runner's output as a video (``--frames``, ``--fps``).
    makes_video = True

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        if self.config("transformer").get("ofs_embed_dim") is not None:
            raise ConfigError(
                f"{self.package_dir}: a CogVideoXPipeline runs a text-to-video transformer; "
                f"this one takes ofs (ofs_embed_dim: image to video)"
            )

    def patch_sizes(self) -> tuple[int, int | None]:
        """``(patch_size, patch_size_t)``; ``patch_size_t`` is None for CogVideoX 1.0."""
        patch = self.config_int("transformer", "patch_size", 2)
        if self.config("transformer").get("patch_size_t") is None:
            return patch, None
        return patch, self.config_int("transformer", "patch_size_t")

    def vae_factors(self) -> tuple[int, int]:
        """``(temporal, spatial)``: frames and pixels per latent."""
        temporal = self.config_int("vae", "temporal_compression_ratio", 4)
        return temporal, self.vae_scale_factor()

    def encode(self, texts: list[str], max_length: int) -> np.ndarray:
        """T5 ``last_hidden_state`` of ``texts`` padded to ``max_length``, unmasked as diffusers runs it."""
        ids = self.tokenize("tokenizer", texts, max_length)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        return self.run("text_encoder/model", feeds, "last_hidden_state")

    def latent_shape(self, batch: int, num_frames: int, height: int, width: int) -> tuple[int, ...]:
        """The initial latents' shape, 1.5's padding frames included; sizes the VAE and
        patches do not divide are refused."""
        temporal, spatial = self.vae_factors()
        if num_frames < 1 or (num_frames - 1) % temporal:
            raise ConfigError(
                f"a CogVideoX video has {temporal}k+1 frames (1, {temporal + 1}, "
                f"{2 * temporal + 1}...), not {num_frames}"
            )
        patch, frame_patch = self.patch_sizes()
        multiple = math.lcm(8, spatial * patch)  # diffusers' check_inputs wants multiples of 8
        if height < 1 or width < 1 or height % multiple or width % multiple:
            raise ConfigError(
                f"a CogVideoX video's height and width are multiples of {multiple}, "
                f"not {height} x {width}"
            )
        frames = (num_frames - 1) // temporal + 1
        frames += -frames % frame_patch if frame_patch else 0
        channels = self.config_int("transformer", "in_channels")
        return batch, frames, channels, height // spatial, width // spatial

    def rotary_tables(self, latent_frames: int, grid: tuple[int, int]) -> dict[str, np.ndarray]:
        """The transformer's ``image_rotary_cos``/``_sin`` feeds, as the pipeline computes them."""
        transformer = self.config("transformer")
        if not transformer.get("use_rotary_positional_embeddings"):
            return {}
        patch, frame_patch = self.patch_sizes()
        head_dim = self.config_int("transformer", "attention_head_dim")
        base = (
            self.config_int("transformer", "sample_height", 60) // patch,
            self.config_int("transformer", "sample_width", 90) // patch,
        )
        if frame_patch is None:
            crops = resize_crop_region(grid, base[1], base[0])
            cos, sin = rotary_3d(head_dim, grid, latent_frames, crops=crops)
        else:
            frames = (latent_frames + frame_patch - 1) // frame_patch
            cos, sin = rotary_3d(head_dim, grid, frames, max_size=base)
        return {"image_rotary_cos": cos, "image_rotary_sin": sin}

    def decode_video(self, latents: np.ndarray) -> np.ndarray:
        """``[batch, frames, C, h, w]`` latents to frames ``[batch, F, H, W, 3]`` in [0, 1]."""
        latents = self.unscale_latents(latents.transpose(0, 2, 1, 3, 4)).astype(np.float32)
        video = self.decode_latents(latents)
        return np.clip(video / 2 + 0.5, 0, 1).transpose(0, 2, 3, 4, 1)

    def __call__(
        self,
        prompt: str | list[str],
        *,
        negative_prompt: str | list[str] | None = None,
        num_inference_steps: int = 50,
        guidance_scale: float | None = None,
        use_dynamic_cfg: bool = False,
        num_frames: int | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        max_sequence_length: int | None = None,
    ) -> np.ndarray:
        """Video frames ``[batch, frames, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``latents`` [batch, latent_frames, C, H/8, W/8] (1.5: padded frames included)
        replaces the seeded noise, as diffusers takes them; defaults: the transformer's
        ``sample_frames`` frames of its sample size, 226 text tokens.
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        _, spatial = self.vae_factors()
        num_frames = num_frames or self.config_int("transformer", "sample_frames", 49)
        height = height or self.config_int("transformer", "sample_height", 60) * spatial
        width = width or self.config_int("transformer", "sample_width", 90) * spatial
        shape = self.latent_shape(len(prompts), num_frames, height, width)
        length = max_sequence_length or self.default_max_sequence_length
        states, guidance_scale, guided = self.guided_states(
            lambda texts: self.encode(texts, length), prompts, negative_prompt, guidance_scale
        )

        scheduler = self.new_scheduler(seed)
        scheduler.set_timesteps(num_inference_steps)
        latents = self.given_or_initial_latents(latents, shape, seed)
        latents = (latents * np.float32(scheduler.init_noise_sigma)).astype(np.float32)
        patch, _ = self.patch_sizes()
        rotary = self.rotary_tables(shape[1], (shape[3] // patch, shape[4] // patch))
        scale = guidance_scale
        for t in self.steps(scheduler.timesteps):
            model_input = np.concatenate([latents] * 2) if guided else latents
            model_input = scheduler.scale_model_input(model_input, t)
            feeds = {
                "hidden_states": model_input,
                "timestep": np.full(model_input.shape[0], t, dtype=np.float32),
                "encoder_hidden_states": states,
                **rotary,
            }
            noise = self.run("transformer/model", feeds, "out_hidden_states")
            if use_dynamic_cfg:
                scale = dynamic_guidance(guidance_scale, int(t), num_inference_steps)
            if guided:
                noise = guide(*np.split(noise, 2), scale)
            latents = scheduler.step(noise, t, latents)
        padding = shape[1] - ((num_frames - 1) // self.vae_factors()[0] + 1)
        return self.decode_video(latents[:, padding:])
