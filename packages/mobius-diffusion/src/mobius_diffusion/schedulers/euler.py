"""The k-diffusion family over a DDPM schedule: Euler, Euler ancestral and Heun.

The sample lives at noise level sigma; ``scale_model_input`` divides it by
``(sigma**2 + 1) ** 0.5`` before the model sees it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mobius_diffusion.schedulers.base import BETA_SCHEDULE_DEFAULTS, F32, DDPMFamily
from mobius_diffusion.schedulers.sigmas import exponential_sigmas, karras_sigmas, sigmas_to_t

_SPACINGS = ("linspace", "leading", "trailing")


def spaced_timesteps(config: dict, steps: int, n: int | None = None) -> np.ndarray:
    """``steps`` float32 timesteps, descending, spaced as ``timestep_spacing`` says."""
    n = n or config["num_train_timesteps"]
    spacing = config["timestep_spacing"]
    if spacing == "linspace":
        return np.linspace(0, n - 1, steps, dtype=F32)[::-1].copy()
    if spacing == "leading":
        ratio = n // steps
        timesteps = (np.arange(0, steps) * ratio).round()[::-1].copy().astype(F32)
        return timesteps + F32(config["steps_offset"])
    ratio = n / steps
    return np.arange(n, 0, -ratio).round().copy().astype(F32) - F32(1)


class _SigmaFamily(DDPMFamily):
    """Euler-style schedulers: ``sigmas`` float32 with a final 0, input scaled by sigma."""

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.sigmas = np.concatenate([self.train_sigmas()[::-1], [0]]).astype(F32)

    @property
    def init_noise_sigma(self) -> np.float32:
        max_sigma = self.sigmas.max()
        if self.config["timestep_spacing"] in ("linspace", "trailing"):
            return max_sigma
        return (max_sigma**2 + 1) ** 0.5

    def scale_model_input(self, sample: np.ndarray, timestep) -> np.ndarray:
        """``sample / (sigma**2 + 1) ** 0.5`` at the current step."""
        if self._step_index is None:
            self._init_step_index(timestep)
        sigma = self.sigmas[self._step_index]
        return (sample / ((sigma**2 + 1) ** 0.5)).astype(sample.dtype)

    def add_noise(self, original: np.ndarray, noise: np.ndarray, timestep) -> np.ndarray:
        """``original`` at the noise level of ``timestep``: ``original + sigma * noise``."""
        sigma = self.sigmas[self.noise_level_index(timestep)]
        return (original + noise * sigma).astype(F32)

    def karras_or_exponential(self, sigmas, timesteps, steps: int):
        """With ``use_karras_sigmas``/``use_exponential_sigmas``: those ``steps`` sigmas between
        the ends of ``sigmas``, and their fractional timesteps; else the arguments unchanged."""
        c = self.config
        if not (c.get("use_karras_sigmas") or c.get("use_exponential_sigmas")):
            return sigmas, timesteps
        convert = karras_sigmas if c["use_karras_sigmas"] else exponential_sigmas
        sigmas = convert(sigmas, steps, c)
        return sigmas, sigmas_to_t(sigmas, np.log(self.train_sigmas()))

    def predicted_original(self, model_output, sample, sigma) -> np.ndarray:
        """x0 from the model output at noise level ``sigma`` (epsilon / v / sample)."""
        kind = self.config["prediction_type"]
        if kind in ("original_sample", "sample"):
            return model_output
        if kind == "epsilon":
            return sample - sigma * model_output
        return model_output * (-sigma / (sigma**2 + 1) ** 0.5) + (sample / (sigma**2 + 1))


class EulerDiscreteScheduler(_SigmaFamily):
    """Euler's method over the sigmas of a DDPM schedule, interpolated or Karras / exponential
    (``s_churn`` 0: deterministic)."""

    defaults = dict(
        BETA_SCHEDULE_DEFAULTS,
        prediction_type="epsilon",
        interpolation_type="linear",
        use_karras_sigmas=False,
        use_exponential_sigmas=False,
        use_beta_sigmas=False,
        sigma_min=None,
        sigma_max=None,
        timestep_spacing="linspace",
        timestep_type="discrete",
        steps_offset=0,
        rescale_betas_zero_snr=False,
        final_sigmas_type="zero",
    )
    supported = dict(
        prediction_type=("epsilon", "v_prediction", "sample", "original_sample"),
        interpolation_type=("linear",),
        use_beta_sigmas=(False, None),
        timestep_spacing=_SPACINGS,
        timestep_type=("discrete", "continuous"),
        rescale_betas_zero_snr=(False,),
        final_sigmas_type=("zero", "sigma_min"),
    )

    def set_timesteps(self, num_inference_steps: int) -> None:
        """``num_inference_steps`` timesteps and their sigmas, interpolated in the training ones.

        ``timestep_type`` ``"continuous"`` with ``v_prediction`` (Stable Video Diffusion's
        EDM-style setting) makes the timesteps ``log(sigma) / 4``, EDM's ``c_noise``.
        """
        c, n = self.config, self.config["num_train_timesteps"]
        self.num_inference_steps = num_inference_steps
        timesteps = spaced_timesteps(c, num_inference_steps)
        sigmas = np.interp(timesteps, np.arange(0, n), self.train_sigmas())
        sigmas, timesteps = self.karras_or_exponential(sigmas, timesteps, num_inference_steps)
        if self.config["final_sigmas_type"] == "sigma_min":
            last = ((1 - self.alphas_cumprod[0]) / self.alphas_cumprod[0]) ** 0.5
        else:
            last = 0
        self.sigmas = np.concatenate([sigmas, [last]]).astype(F32)
        self.timesteps = timesteps.astype(F32)
        if c["timestep_type"] == "continuous" and c["prediction_type"] == "v_prediction":
            # torch's float32 log, correctly rounded (numpy's float32 log may be an ulp off)
            log_sigmas = np.log(self.sigmas[:-1].astype(np.float64)).astype(F32)
            self.timesteps = (F32(0.25) * log_sigmas).astype(F32)
        self._step_index = None

    def step(self, model_output: np.ndarray, timestep, sample: np.ndarray) -> np.ndarray:
        """The sample at the next sigma: one Euler step along ``(sample - x0) / sigma``."""
        if self._step_index is None:
            self._init_step_index(timestep)
        sample = sample.astype(F32)
        sigma = self.sigmas[self._step_index]  # s_churn 0: sigma_hat is sigma
        pred_original = self.predicted_original(model_output, sample, sigma)
        derivative = (sample - pred_original) / sigma
        dt = self.sigmas[self._step_index + 1] - sigma
        self._step_index += 1
        return (sample + derivative * dt).astype(model_output.dtype)


class EulerAncestralDiscreteScheduler(_SigmaFamily):
    """Euler steps down to ``sigma_down``, then fresh noise up to the next sigma (seeded noise)."""

    defaults = dict(
        BETA_SCHEDULE_DEFAULTS,
        prediction_type="epsilon",
        timestep_spacing="linspace",
        steps_offset=0,
        rescale_betas_zero_snr=False,
    )
    supported = dict(
        prediction_type=("epsilon", "v_prediction"),
        timestep_spacing=_SPACINGS,
        rescale_betas_zero_snr=(False,),
    )

    def set_timesteps(self, num_inference_steps: int) -> None:
        """``num_inference_steps`` timesteps and their sigmas, interpolated in the training ones."""
        n = self.config["num_train_timesteps"]
        self.num_inference_steps = num_inference_steps
        timesteps = spaced_timesteps(self.config, num_inference_steps)
        sigmas = np.interp(timesteps, np.arange(0, n), self.train_sigmas())
        self.sigmas = np.concatenate([sigmas, [0.0]]).astype(F32)
        self.timesteps = timesteps
        self._step_index = None

    def step(
        self,
        model_output: np.ndarray,
        timestep,
        sample: np.ndarray,
        *,
        generator: np.random.Generator | None = None,
        variance_noise: np.ndarray | None = None,
    ) -> np.ndarray:
        """The next sample: deterministic part to ``sigma_down`` plus ``noise * sigma_up``."""
        if self._step_index is None:
            self._init_step_index(timestep)
        sigma = self.sigmas[self._step_index]
        sample = sample.astype(F32)
        pred_original = self.predicted_original(model_output, sample, sigma)
        sigma_from, sigma_to = sigma, self.sigmas[self._step_index + 1]
        sigma_up = (sigma_to**2 * (sigma_from**2 - sigma_to**2) / sigma_from**2) ** 0.5
        sigma_down = (sigma_to**2 - sigma_up**2) ** 0.5
        derivative = (sample - pred_original) / sigma
        prev_sample = sample + derivative * (sigma_down - sigma)
        noise = self.noise(model_output.shape, variance_noise, generator)
        self._step_index += 1
        return (prev_sample + noise * sigma_up).astype(model_output.dtype)


class HeunDiscreteScheduler(_SigmaFamily):
    """Heun's second-order method: two calls per timestep (``timesteps`` repeats each but the first).

    The runner calls ``scale_model_input``, the model and ``step`` once per entry of
    ``timesteps``, as for any scheduler; the first call of a pair is an Euler step, the
    second averages the two slopes from the pair's starting sample.
    """

    order = 2
    defaults = dict(
        BETA_SCHEDULE_DEFAULTS,
        beta_start=0.00085,
        beta_end=0.012,
        prediction_type="epsilon",
        use_karras_sigmas=False,
        use_exponential_sigmas=False,
        use_beta_sigmas=False,
        clip_sample=False,
        clip_sample_range=1.0,
        timestep_spacing="linspace",
        steps_offset=0,
    )
    supported = dict(
        prediction_type=("epsilon", "v_prediction", "sample"),
        use_beta_sigmas=(False, None),
        timestep_spacing=_SPACINGS,
    )

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.set_timesteps(self.config["num_train_timesteps"])  # as diffusers: a schedule at once

    def set_timesteps(self, num_inference_steps: int) -> None:
        """The timesteps, every one after the first twice, with their sigmas likewise."""
        c, n = self.config, self.config["num_train_timesteps"]
        self.num_inference_steps = num_inference_steps
        timesteps = spaced_timesteps(c, num_inference_steps)
        sigmas = np.interp(timesteps, np.arange(0, n), self.train_sigmas())
        sigmas, timesteps = self.karras_or_exponential(sigmas, timesteps, num_inference_steps)
        sigmas = np.concatenate([sigmas, [0.0]]).astype(F32)
        self.sigmas = np.concatenate([sigmas[:1], sigmas[1:-1].repeat(2), sigmas[-1:]])
        self.timesteps = np.concatenate([timesteps[:1], timesteps[1:].repeat(2)]).astype(F32)
        self.prev_derivative = self.dt = self.first_sample = None
        self._step_index = None

    def step(self, model_output: np.ndarray, timestep, sample: np.ndarray) -> np.ndarray:
        """The first call of a pair: an Euler step; the second: Heun's corrected step."""
        if self._step_index is None:
            self._init_step_index(timestep)
        first = self.dt is None
        if first:
            sigma, sigma_next = self.sigmas[self._step_index], self.sigmas[self._step_index + 1]
        else:
            sigma, sigma_next = self.sigmas[self._step_index - 1], self.sigmas[self._step_index]
        sigma_hat = sigma * (0 + 1)  # gamma 0
        sigma_input = sigma_hat if first else sigma_next
        pred_original = self.predicted_original(model_output, sample, sigma_input)
        if self.config["clip_sample"]:
            limit = self.config["clip_sample_range"]
            pred_original = np.clip(pred_original, -limit, limit).astype(pred_original.dtype)
        if first:
            derivative = (sample - pred_original) / sigma_hat
            dt = sigma_next - sigma_hat
            self.prev_derivative, self.dt, self.first_sample = derivative, dt, sample
        else:
            derivative = (sample - pred_original) / sigma_next
            derivative = (self.prev_derivative + derivative) / 2
            dt, sample = self.dt, self.first_sample
            self.prev_derivative = self.dt = self.first_sample = None
        self._step_index += 1
        return (sample + derivative * dt).astype(F32)
