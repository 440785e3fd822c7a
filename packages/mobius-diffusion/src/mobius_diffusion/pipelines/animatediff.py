"""AnimateDiff text to video: Stable Diffusion's CLIP text encoder and VAE, the UNet with motion modules."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.base import PipelineRunner, guide
from mobius_diffusion.pipelines.sd import StableDiffusionRunner


class AnimateDiffRunner(StableDiffusionRunner):
    """``AnimateDiffPipeline``: a prompt to a video ``[batch, frames, H, W, 3]`` in [0, 1].

    As diffusers: the prompt's CLIP states (the negative prompt's first, with
    ``guidance_scale`` 7.5) condition ``unet/model`` (a ``UNetMotionModel``: the graph
    repeats each video's states for its frames, as the pipeline repeats them before
    the call) over latents ``[batch, 4, frames, H / 8, W / 8]``, scaled by the
    scheduler's ``init_noise_sigma`` and denoised with the package's scheduler. The
    frames are decoded one image at a time by the SD VAE, ``decode_chunk_size`` of
    them to a run. The package has no ``motion_adapter``: the whole-pipeline build
    leaves it out, the unet holding its motion modules (see
    :data:`mobius_diffusion.pipeline_source.FOLDED_COMPONENTS`). FreeInit, FreeNoise
    and IP-Adapter images are not run.
    """

    default_guidance_scale = 7.5
    default_num_frames = 16
    default_decode_chunk_size = 16
    #: ``mobius generate`` writes this runner's output as a video (``--frames``, ``--fps``).
    makes_video = True

    def __init__(self, package_dir, **options) -> None:
        PipelineRunner.__init__(self, package_dir, **options)
        unet = self.config("unet")
        if unet.get("_class_name") != "UNetMotionModel":
            raise ConfigError(
                f"an AnimateDiffPipeline's unet is a UNetMotionModel, not {unet.get('_class_name')}"
            )
        for key in ("time_cond_proj_dim", "addition_embed_type"):  # the pipeline feeds neither
            if unet.get(key) is not None:
                raise ConfigError(f"an AnimateDiffPipeline with a unet {key} is not run by mobius")

    def decode_video(self, latents: np.ndarray, chunk: int) -> np.ndarray:
        """Frames ``[batch, frames, H, W, 3]`` in [0, 1] (``output_type="np"``): each frame's
        latents, unscaled, through the image VAE ``chunk`` frames at a time."""
        batch, channels, frames, height, width = latents.shape
        images = self.unscale_latents(latents).transpose(0, 2, 1, 3, 4)
        images = images.reshape(batch * frames, channels, height, width)
        decoded = [self.decode_latents(images[i : i + chunk]) for i in range(0, len(images), chunk)]
        video = np.concatenate(decoded).reshape(batch, frames, *decoded[0].shape[1:])
        return np.clip(video / 2 + 0.5, 0, 1).transpose(0, 1, 3, 4, 2)

    def __call__(
        self,
        prompt: str | list[str],
        *,
        negative_prompt: str | list[str] | None = None,
        num_inference_steps: int = 50,
        guidance_scale: float | None = None,
        num_frames: int | None = None,
        height: int | None = None,
        width: int | None = None,
        seed: int | None = None,
        latents: np.ndarray | None = None,
        decode_chunk_size: int | None = None,
    ) -> np.ndarray:
        """Video frames ``[batch, frames, H, W, 3]`` float32 in [0, 1] for ``prompt``.

        ``latents`` [batch, 4, frames, H/8, W/8] replaces the seeded noise (before the
        scheduler's ``init_noise_sigma``, as diffusers takes them). Defaults: 16 frames at
        the unet's ``sample_size`` times the VAE's scale, 16 frames decoded to a run.
        """
        prompts = [prompt] if isinstance(prompt, str) else list(prompt)
        frames = num_frames or self.default_num_frames
        limit = self.config_int("unet", "motion_max_seq_length", 32)
        if not 1 <= frames <= limit:  # the motion modules' positions run out past it
            raise ConfigError(f"this AnimateDiff video has 1 to {limit} frames, not {frames}")
        factor = self.vae_scale_factor()
        height = height or self.config_int("unet", "sample_size") * factor
        width = width or self.config_int("unet", "sample_size") * factor
        if height % factor or width % factor or height < factor or width < factor:
            raise ConfigError(
                f"an AnimateDiff video's height and width are multiples of {factor}, "
                f"not {height} x {width}"
            )
        chunk = decode_chunk_size or self.default_decode_chunk_size
        states, guidance_scale, guided = self.guided_states(
            self.encode, prompts, negative_prompt, guidance_scale
        )

        scheduler = self.new_scheduler(seed)
        scheduler.set_timesteps(num_inference_steps)
        channels = self.config_int("unet", "in_channels")
        shape = (len(prompts), channels, frames, height // factor, width // factor)
        latents = self.given_or_initial_latents(latents, shape, seed)
        latents = (latents * np.float32(scheduler.init_noise_sigma)).astype(np.float32)
        for t in self.steps(scheduler.timesteps):
            model_input = np.concatenate([latents] * 2) if guided else latents
            model_input = scheduler.scale_model_input(model_input, t)
            timestep = np.full(model_input.shape[0], t, dtype=np.float32)
            feeds = {"sample": model_input, "timestep": timestep, "encoder_hidden_states": states}
            noise = self.run("unet/model", feeds, "out_sample")
            if guided:
                noise = guide(*np.split(noise, 2), guidance_scale)
            latents = scheduler.step(noise, t, latents)
        return self.decode_video(latents, chunk)
