"""LTX-Video text to video: T5 states and their mask, packed latent tokens, flow matching, the video VAE."""

from __future__ import annotations

import math
import re

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide, one_per_prompt
from mobius_diffusion.pipelines.flux import calculate_shift

F32 = np.float32


def pack_latents(latents: np.ndarray) -> np.ndarray:
    """``[batch, C, frames, H, W]`` -> ``[batch, frames * H * W, C]``: one token per latent pixel."""
    b, c = latents.shape[:2]
    return latents.reshape(b, c, -1).transpose(0, 2, 1)


def unpack_latents(latents: np.ndarray, frames: int, height: int, width: int) -> np.ndarray:
    """The inverse of :func:`pack_latents` for a latent grid ``frames`` x ``height`` x ``width``."""
    b, _, c = latents.shape
    return latents.transpose(0, 2, 1).reshape(b, c, frames, height, width)


def rescale_guidance(noise: np.ndarray, cond: np.ndarray, rescale: float) -> np.ndarray:
    """diffusers' ``rescale_noise_cfg``: the guided prediction moved ``rescale`` of the way to
    itself scaled to the conditional one's standard deviation (per sample, unbiased as torch's)."""
    axes = tuple(range(1, noise.ndim))
    ratio = cond.std(axis=axes, ddof=1, keepdims=True) / noise.std(axis=axes, ddof=1, keepdims=True)
    return (F32(rescale) * (noise * ratio) + F32(1 - rescale) * noise).astype(F32)


def one_per_video(value, batch: int, name: str) -> np.ndarray:
    """A number, or one per prompt, as float32 ``[batch]``."""
    values = [value] * batch if isinstance(value, int | float) else list(value)
    if len(values) != batch:
        raise ConfigError(f"{name} gives {len(values)} values for {batch} prompts")
    return np.asarray(values, F32)


class LTXRunner(PipelineRunner):
    """``LTXPipeline``: a prompt to a video ``[batch, frames, H, W, 3]`` in [0, 1].

    As diffusers: each text is tokenized to ``max_sequence_length`` (128) tokens and
    encoded by T5 without a mask (as diffusers runs it); the mask goes to the transformer's
    cross-attention instead. Guidance with the negative prompt (default "") when
    ``guidance_scale`` (3) is above 1, optionally rescaled (``guidance_rescale``). The
    latent video ``[batch, C, (frames - 1) / temporal + 1, H / spatial, W / spatial]`` (the
    VAE config's compression ratios) is denoised as packed tokens by ``transformer/model``,
    fed the token grid and the rotary scale ``(temporal / fps, spatial, spatial)``, with
    flow-matching Euler over ``linspace(1, 1 / steps, steps)`` shifted by ``mu`` for the
    latent pixel count. The tokens are unpacked, de-normalised with the VAE's
    ``latents_mean``/``latents_std`` (``vae/latents/model``) and ``scaling_factor``, and
    decoded by ``vae/decoder/model``.

    A decoder conditioned on the decode timestep (0.9.1+) gets ``decode_timestep`` and
    latents mixed with ``decode_noise_scale`` (default: the timestep) of Gaussian noise;
    that noise and the decoder's injected noise (``noise.{i}``) are drawn, in diffusers'
    order, from ``numpy.random.default_rng([seed, 2])`` (:meth:`decode_noise`), where
    diffusers draws them from its torch generator. A frame count or size diffusers would
    round is refused; so are transformer patches other than 1 (diffusers' pipeline gives
    the transformer the latent grid, not the token grid, and cannot run them).
    """

    default_guidance_scale = 3.0
    default_max_sequence_length = 128
    default_num_frames, default_height, default_width = 161, 512, 704
    #: ``mobius generate`` writes this runner's output as a video (``--frames``, ``--fps``).
    makes_video = True
    #: The frame rate it conditions on, and writes at, by default (``--fps``).
    default_fps = 25

    def __init__(self, package_dir, **options) -> None:
        super().__init__(package_dir, **options)
        scheduler = self.scheduler_config.get("_class_name")
        if scheduler != "FlowMatchEulerDiscreteScheduler":
            raise ConfigError(
                f"an LTXPipeline runs FlowMatchEulerDiscreteScheduler (it passes sigmas and mu), "
                f"not {scheduler}"
            )
        for key in ("patch_size", "patch_size_t"):
            if self.config_int("transformer", key, 1) != 1:
                raise ConfigError(
                    f"transformer/config.json {key} is not 1: diffusers' LTXPipeline cannot run "
                    "patches (it gives the transformer the latent grid)"
                )

    def vae_factors(self) -> tuple[int, int]:
        """``(temporal, spatial)``: frames and pixels per latent, the VAE config's compression
        ratios (0.9.5+), else as diffusers derives them from the encoder's scaling flags."""
        vae = self.config("vae")
        scaling = vae.get("spatio_temporal_scaling", [True, True, True, False])
        if not isinstance(scaling, list) or not all(isinstance(s, bool) for s in scaling):
            raise ConfigError(
                f"vae/config.json spatio_temporal_scaling is {scaling!r}, not booleans"
            )
        levels = 2 ** sum(scaling)
        temporal = self.config_int("vae", "patch_size_t", 1) * levels
        spatial = self.config_int("vae", "patch_size", 4) * levels
        return (
            self.config_int("vae", "temporal_compression_ratio", temporal),
            self.config_int("vae", "spatial_compression_ratio", spatial),
        )

    def latent_grid(self, num_frames: int, height: int, width: int) -> tuple[int, int, int]:
        """``(frames, rows, columns)`` of the latent video; what diffusers would round is refused."""
        temporal, spatial = self.vae_factors()
        if num_frames < 1 or (num_frames - 1) % temporal:
            raise ConfigError(
                f"an LTX video has {temporal}k+1 frames (1, {temporal + 1}, {2 * temporal + 1}...), "
                f"not {num_frames}"
            )
        multiple = math.lcm(32, spatial)  # diffusers' check_inputs: multiples of 32
        if height < 1 or width < 1 or height % multiple or width % multiple:
            raise ConfigError(
                f"an LTX video's height and width are multiples of {multiple}, "
                f"not {height} x {width}"
            )
        return (num_frames - 1) // temporal + 1, height // spatial, width // spatial

    def encode(self, texts: list[str], max_length: int) -> tuple[np.ndarray, np.ndarray]:
        """``(T5 last_hidden_state, attention_mask int64)`` of ``texts`` padded to ``max_length``."""
        encoded = self.tokenizer("tokenizer")(
            texts, padding="max_length", max_length=max_length, truncation=True
        )
        ids = np.asarray(encoded["input_ids"], dtype=np.int64)
        mask = np.asarray(encoded["attention_mask"], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}  # T5 runs unmasked
        return self.run("text_encoder/model", feeds, "last_hidden_state"), mask

    def noise_shapes(self, rows: int, columns: int) -> dict[str, tuple[int, ...]]:
        """The decoder's ``noise.{i}`` inputs and their shapes for a latent of ``rows`` x
        ``columns`` (the graph names each side ``latent_height`` or ``latent_height_x{k}``)."""
        sides = {"latent_height": rows, "latent_width": columns}
        shapes = {}
        for graph_input in self.session("vae/decoder/model").get_inputs():
            if not graph_input.name.startswith("noise."):
                continue
            shape = []
            for dim in graph_input.shape:
                found = re.fullmatch(r"(latent_height|latent_width)(?:_x(\d+))?", str(dim))
                if found is None:
                    raise ConfigError(f"vae/decoder/model.onnx {graph_input.name} has side {dim!r}")
                shape.append(sides[found[1]] * int(found[2] or 1))
            shapes[graph_input.name] = tuple(shape)
        return dict(sorted(shapes.items(), key=lambda item: int(item[0].split(".")[1])))

    def decode_noise(
        self, shape: tuple[int, ...], seed: int | None
    ) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
        """The decode's draws for de-normalised latents of ``shape``, in diffusers' order: the
        noise mixed into the latents (a timestep-conditioned decoder only, else None), then
        each ``noise.{i}`` of the decoder; float32 from ``default_rng([seed, 2])``."""
        rng = np.random.default_rng(None if seed is None else [seed, 2])
        conditioned = "timestep" in self.graph_inputs("vae/decoder/model")
        mixed = rng.standard_normal(shape).astype(F32) if conditioned else None
        draws = {
            name: rng.standard_normal(size).astype(F32)
            for name, size in self.noise_shapes(*shape[-2:]).items()
        }
        return mixed, draws

    def decode_video(
        self, latents: np.ndarray, decode_timestep, decode_noise_scale, seed: int | None
    ) -> np.ndarray:
        """Frames ``[batch, frames, H, W, 3]`` in [0, 1] of the final latents ``[batch, C, f, h, w]``."""
        if self.vae_tiling:
            from mobius_diffusion.tiling import tile_plan

            tile_plan(self.config("vae"))  # refuses: LTX's VAE has no tiled decode here
        mean, std = self.run_outputs("vae/latents/model", {}, ["mean", "std"])
        scaling = F32(self.config("vae").get("scaling_factor", 1.0))
        view = (1, -1, 1, 1, 1)
        latents = (latents * std.reshape(view) / scaling + mean.reshape(view)).astype(F32)
        mixed, feeds = self.decode_noise(latents.shape, seed)
        if mixed is not None:
            batch = latents.shape[0]
            timestep = one_per_video(decode_timestep, batch, "decode_timestep")
            scale = timestep if decode_noise_scale is None else decode_noise_scale
            scale = one_per_video(scale, batch, "decode_noise_scale").reshape(view)
            latents = ((F32(1) - scale) * latents + scale * mixed).astype(F32)
            feeds["timestep"] = timestep
        video = self.run("vae/decoder/model", {"latent_sample": latents, **feeds}, "sample")
        return np.clip(video / 2 + 0.5, 0, 1).transpose(0, 2, 3, 4, 1)

    def flow_scheduler(self, seed: int | None, steps: int, tokens: int):
        """A fresh scheduler set to ``linspace(1, 1 / steps, steps)``, shifted by ``mu`` for
        ``tokens`` latent pixels (used when the scheduler shifts dynamically)."""
        scheduler = self.new_scheduler(seed)
        c = scheduler.config
        if steps < 2 and c.get("shift_terminal"):
            raise ConfigError(  # diffusers' stretch of one sigma divides 0 by 0
                f"an LTX scheduler with shift_terminal needs at least 2 steps, not {steps}"
            )
        mu = calculate_shift(
            tokens,
            c.get("base_image_seq_len", 256),
            c.get("max_image_seq_len", 4096),
            c.get("base_shift", 0.5),
            c.get("max_shift", 1.15),
        )
        scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
        return scheduler

    def __call__(
        self,
        prompt: str | list[str],
        *,
        negative_prompt: str | list[str] | None = None,
        num_inference_steps: int = 50,
        guidance_scale: float | None = None,
        guidance_rescale: float = 0.0,
        num_frames: int | None = None,
        height: int | None = None,
        width: int | None = None,
        fps: float | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        max_sequence_length: int | None = None,
        decode_timestep: float | list[float] = 0.0,
        decode_noise_scale: float | list[float] | None = None,
    ) -> np.ndarray:
        """Video frames ``[batch, frames, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``fps`` is diffusers' ``frame_rate`` (25). ``latents`` replaces the seeded noise
        packed, as diffusers takes them: ``[batch, latent frames * rows * columns, C]``.
        Defaults as diffusers': 161 frames of 512 x 704, 128 text tokens.
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        grid = self.latent_grid(
            num_frames or self.default_num_frames,
            height or self.default_height,
            width or self.default_width,
        )
        rate = self.default_fps if fps is None else fps
        if not rate > 0:
            raise ConfigError(f"an LTX video's fps must be positive, not {rate}")
        scheduler = self.flow_scheduler(seed, num_inference_steps, math.prod(grid))
        length = max_sequence_length or self.default_max_sequence_length
        scale = self.default_guidance_scale if guidance_scale is None else guidance_scale
        guided = scale > 1
        states, mask = self.encode(prompts, length)
        if guided:
            negative, negative_mask = self.encode(
                one_per_prompt(negative_prompt, len(prompts)), length
            )
            states, mask = np.concatenate([negative, states]), np.concatenate([negative_mask, mask])

        channels = self.config_int("transformer", "in_channels")
        shape = (len(prompts), math.prod(grid), channels)
        if latents is None:
            latents = pack_latents(self.initial_noise((len(prompts), channels, *grid), seed))
        elif tuple(latents.shape) != shape:
            raise ConfigError(
                f"packed latents of shape {tuple(latents.shape)} given; this video needs {shape}"
            )
        latents = latents.astype(F32)

        temporal, spatial = self.vae_factors()
        feeds = {
            "encoder_hidden_states": states,
            "encoder_attention_mask": mask,
            "video_shape": np.asarray(grid, np.int64),
            "rope_interpolation_scale": np.asarray([temporal / rate, spatial, spatial], F32),
        }
        for t in self.steps(scheduler.timesteps):
            model_input = np.concatenate([latents] * 2) if guided else latents
            feeds.update(hidden_states=model_input, timestep=np.full(len(model_input), t, F32))
            noise = self.run("transformer/model", feeds, "out_hidden_states")
            if guided:
                uncond, cond = np.split(noise, 2)
                noise = guide(uncond, cond, scale)
                if guidance_rescale > 0:
                    noise = rescale_guidance(noise, cond, guidance_rescale)
            latents = scheduler.step(noise, t, latents)
        latents = unpack_latents(latents, *grid)
        return self.decode_video(latents, decode_timestep, decode_noise_scale, seed)
