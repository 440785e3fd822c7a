"""DDIM and the latent consistency model's LCM: steps between ``alphas_cumprod`` values."""

from __future__ import annotations

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.schedulers.base import BETA_SCHEDULE_DEFAULTS, F32, PreviousAlphaFamily


def ddim_timesteps(config: dict, steps: int) -> np.ndarray:
    """DDIM's integer timesteps, descending."""
    n = config["num_train_timesteps"]
    spacing = config["timestep_spacing"]
    if spacing == "linspace":
        return np.linspace(0, n - 1, steps).round().astype(np.int64)[::-1].copy()
    if spacing == "leading":
        ratio = n // steps
        return (np.arange(0, steps) * ratio).round()[::-1].copy().astype(np.int64) + config[
            "steps_offset"
        ]
    if spacing == "trailing":
        ratio = n / steps
        return np.round(np.arange(n, 0, -ratio)).astype(np.int64) - 1
    raise ConfigError(f"timestep_spacing {spacing!r} is not ported")


class DDIMScheduler(PreviousAlphaFamily):
    """DDIM with ``eta`` 0 (deterministic), as the pipelines call it by default."""

    defaults = dict(
        BETA_SCHEDULE_DEFAULTS,
        clip_sample=True,
        set_alpha_to_one=True,
        steps_offset=0,
        prediction_type="epsilon",
        thresholding=False,
        dynamic_thresholding_ratio=0.995,
        clip_sample_range=1.0,
        sample_max_value=1.0,
        timestep_spacing="leading",
        rescale_betas_zero_snr=False,
    )
    supported = dict(
        prediction_type=("epsilon", "sample", "v_prediction"),
        thresholding=(False,),
        timestep_spacing=("linspace", "leading", "trailing"),
        rescale_betas_zero_snr=(False,),
    )

    def set_timesteps(self, num_inference_steps: int) -> None:
        if num_inference_steps > self.config["num_train_timesteps"]:
            raise ValueError("num_inference_steps cannot exceed num_train_timesteps")
        self.num_inference_steps = num_inference_steps
        self.timesteps = ddim_timesteps(self.config, num_inference_steps)

    def step(self, model_output: np.ndarray, timestep, sample: np.ndarray) -> np.ndarray:
        c = self.config
        timestep = int(timestep)
        prev = timestep - c["num_train_timesteps"] // self.num_inference_steps
        alpha_t, alpha_prev = self.alphas_cumprod[timestep], self.previous_alpha(prev)
        beta_t = 1 - alpha_t
        if c["prediction_type"] == "epsilon":
            pred_original = (sample - beta_t**0.5 * model_output) / alpha_t**0.5
            pred_epsilon = model_output
        elif c["prediction_type"] == "sample":
            pred_original = model_output
            pred_epsilon = (sample - alpha_t**0.5 * pred_original) / beta_t**0.5
        else:  # v_prediction
            pred_original = (alpha_t**0.5) * sample - (beta_t**0.5) * model_output
            pred_epsilon = (alpha_t**0.5) * model_output + (beta_t**0.5) * sample
        if c["clip_sample"]:
            limit = c["clip_sample_range"]
            pred_original = np.clip(pred_original, -limit, limit).astype(pred_original.dtype)
        std_dev_t = F32(0.0)  # eta 0
        direction = (1 - alpha_prev - std_dev_t**2) ** 0.5 * pred_epsilon
        return alpha_prev**0.5 * pred_original + direction


class LCMScheduler(PreviousAlphaFamily):
    """Latent consistency models: each step denoises to x0 with the boundary-condition scalings,
    then (but at the last step) re-noises to the next timestep with seeded noise.

    ``denoised`` holds the last step's x0 (the LCM pipelines decode it; at the last step it
    is the returned sample).
    """

    defaults = dict(
        BETA_SCHEDULE_DEFAULTS,
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        original_inference_steps=50,
        clip_sample=False,
        clip_sample_range=1.0,
        set_alpha_to_one=True,
        steps_offset=0,
        prediction_type="epsilon",
        thresholding=False,
        dynamic_thresholding_ratio=0.995,
        sample_max_value=1.0,
        timestep_spacing="leading",
        timestep_scaling=10.0,
        rescale_betas_zero_snr=False,
    )
    supported = dict(
        prediction_type=("epsilon", "sample", "v_prediction"),
        thresholding=(False,),
        rescale_betas_zero_snr=(False,),
    )
    sigma_data = 0.5

    def set_timesteps(
        self, num_inference_steps: int, original_inference_steps: int | None = None
    ) -> None:
        """``num_inference_steps`` timesteps taken evenly from the distillation schedule."""
        n = self.config["num_train_timesteps"]
        original = original_inference_steps or self.config["original_inference_steps"]
        if original > n or num_inference_steps > original:
            raise ValueError(
                f"num_inference_steps {num_inference_steps} must be at most "
                f"original_inference_steps {original}, itself at most {n}"
            )
        origin = (np.asarray(list(range(1, original + 1))) * (n // original) - 1)[::-1].copy()
        indices = np.linspace(0, len(origin), num=num_inference_steps, endpoint=False)
        self.timesteps = origin[np.floor(indices).astype(np.int64)].astype(np.int64)
        self.num_inference_steps = num_inference_steps
        self.denoised = None
        self._step_index = None

    def boundary_scalings(self, timestep) -> tuple[np.float32, np.float32]:
        """``(c_skip, c_out)`` of the consistency model's boundary condition at ``timestep``."""
        scaled = F32(timestep) * F32(self.config["timestep_scaling"])
        c_skip = self.sigma_data**2 / (scaled**2 + self.sigma_data**2)
        c_out = scaled / (scaled**2 + self.sigma_data**2) ** 0.5
        return c_skip, c_out

    def step(
        self,
        model_output: np.ndarray,
        timestep,
        sample: np.ndarray,
        *,
        generator: np.random.Generator | None = None,
        variance_noise: np.ndarray | None = None,
    ) -> np.ndarray:
        """The next sample: x0 scaled to the next timestep plus seeded noise (none at the end)."""
        if self._step_index is None:
            self._init_step_index(timestep)
        c, timestep = self.config, int(timestep)
        following = self._step_index + 1
        prev = int(self.timesteps[following]) if following < len(self.timesteps) else timestep
        alpha_t, alpha_prev = self.alphas_cumprod[timestep], self.previous_alpha(prev)
        beta_t, beta_prev = 1 - alpha_t, 1 - alpha_prev
        c_skip, c_out = self.boundary_scalings(timestep)
        if c["prediction_type"] == "epsilon":
            pred_original = (sample - np.sqrt(beta_t) * model_output) / np.sqrt(alpha_t)
        elif c["prediction_type"] == "sample":
            pred_original = model_output
        else:  # v_prediction
            pred_original = np.sqrt(alpha_t) * sample - np.sqrt(beta_t) * model_output
        if c["clip_sample"]:
            limit = c["clip_sample_range"]
            pred_original = np.clip(pred_original, -limit, limit).astype(pred_original.dtype)
        self.denoised = c_out * pred_original + c_skip * sample
        prev_sample = self.denoised
        if self._step_index != self.num_inference_steps - 1:
            noise = self.noise(model_output.shape, variance_noise, generator)
            prev_sample = np.sqrt(alpha_prev) * self.denoised + np.sqrt(beta_prev) * noise
        self._step_index += 1
        return prev_sample.astype(F32)
