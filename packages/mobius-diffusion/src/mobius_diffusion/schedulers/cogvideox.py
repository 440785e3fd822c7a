"""CogVideoX's samplers: DDIM and a stochastic DPM-Solver over an SNR-shifted schedule.

diffusers keeps the ``scaled_linear`` schedule (the CogVideoX default) in float64 and
casts each step's coefficients to the sample's float32 as torch does when a 0-d float64
tensor multiplies a float32 one; the port does the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mobius_diffusion.schedulers.base import BETA_SCHEDULE_DEFAULTS, F32, Scheduler, betas
from mobius_diffusion.schedulers.ddim import ddim_timesteps


def rescale_zero_terminal_snr(alphas_cumprod: np.ndarray) -> np.ndarray:
    """``alphas_cumprod`` moved and scaled so the last is 0 and the first unchanged (in root space)."""
    root = np.sqrt(alphas_cumprod)
    first, last = root[0].copy(), root[-1].copy()
    root = (root - last) * (first / (first - last))
    return root**2


class CogVideoXDDIMScheduler(Scheduler):
    """``CogVideoXDDIMScheduler``: ``alphas_cumprod / (s + (1 - s) alphas_cumprod)`` with
    ``s = snr_shift_scale``, optionally rescaled to zero terminal SNR; each step goes from the
    predicted x0 and the sample straight to the previous timestep (deterministic, eta 0).
    ``clip_sample`` is read but, as in diffusers, not applied."""

    defaults = dict(
        BETA_SCHEDULE_DEFAULTS,
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=True,
        set_alpha_to_one=True,
        steps_offset=0,
        prediction_type="epsilon",
        clip_sample_range=1.0,
        sample_max_value=1.0,
        timestep_spacing="leading",
        rescale_betas_zero_snr=False,
        snr_shift_scale=3.0,
    )
    supported = dict(
        prediction_type=("epsilon", "sample", "v_prediction"),
        timestep_spacing=("linspace", "leading", "trailing"),
    )
    init_noise_sigma = F32(1.0)

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        c = self.config
        if c["beta_schedule"] == "scaled_linear" and c.get("trained_betas") is None:
            # diffusers builds this one schedule in float64 (the others in float32)
            roots = np.linspace(
                c["beta_start"] ** 0.5, c["beta_end"] ** 0.5, c["num_train_timesteps"]
            )
            schedule = roots**2
        else:
            schedule = betas(c)
        dtype = schedule.dtype
        alphas = (1 - schedule).astype(dtype)
        # torch's cumprod accumulates float32 in float64, rounding each product once
        cumprod = np.cumprod(alphas.astype(np.float64)).astype(dtype)
        shift = dtype.type(c["snr_shift_scale"])
        cumprod = (cumprod / (shift + (1 - shift) * cumprod)).astype(dtype)
        if c["rescale_betas_zero_snr"]:
            cumprod = rescale_zero_terminal_snr(cumprod).astype(dtype)
        self.alphas_cumprod = cumprod
        # 0-d values keep the schedule's dtype, as diffusers' 0-d tensors do
        self.final_alpha_cumprod = dtype.type(1.0) if c["set_alpha_to_one"] else cumprod[0]

    def set_timesteps(self, num_inference_steps: int) -> None:
        if num_inference_steps > self.config["num_train_timesteps"]:
            raise ValueError("num_inference_steps cannot exceed num_train_timesteps")
        self.num_inference_steps = num_inference_steps
        self.timesteps = ddim_timesteps(self.config, num_inference_steps)

    def alphas(self, timestep: int) -> tuple[np.floating, np.floating, int]:
        """``(alphas_cumprod at timestep, at the previous timestep, the previous timestep)``."""
        prev = timestep - self.config["num_train_timesteps"] // self.num_inference_steps
        alpha_prev = self.alphas_cumprod[prev] if prev >= 0 else self.final_alpha_cumprod
        return self.alphas_cumprod[timestep], alpha_prev, prev

    def predicted_original(self, model_output, alpha_t, sample: np.ndarray) -> np.ndarray:
        """x0 from the model's output (of ``prediction_type``), in float32."""
        beta_t = 1 - alpha_t
        kind = self.config["prediction_type"]
        if kind == "epsilon":
            return (sample - F32(beta_t**0.5) * model_output) / F32(alpha_t**0.5)
        if kind == "sample":
            return model_output
        return F32(alpha_t**0.5) * sample - F32(beta_t**0.5) * model_output  # v_prediction

    def step(self, model_output: np.ndarray, timestep, sample: np.ndarray) -> np.ndarray:
        """The sample at the previous timestep: ``a * sample + b * x0`` (DDIM with eta 0)."""
        alpha_t, alpha_prev, _ = self.alphas(int(timestep))
        x0 = self.predicted_original(model_output, alpha_t, sample)
        a = ((1 - alpha_prev) / (1 - alpha_t)) ** 0.5
        b = alpha_prev**0.5 - alpha_t**0.5 * a
        return (F32(a) * sample + F32(b) * x0).astype(F32)


class CogVideoXDPMScheduler(CogVideoXDDIMScheduler):
    """``CogVideoXDPMScheduler`` (the 5B checkpoints'): a stochastic DPM-Solver step on the same
    schedule, second order from the second step on, with the previous step's x0.

    Each step draws standard normal noise from :attr:`generator` (two draws on a second-order
    step, the first unused, as diffusers draws them). diffusers' pipeline hands the previous
    x0 and timestep back to every call; this port keeps them itself, so ``step`` takes what
    every scheduler's takes.
    """

    def set_timesteps(self, num_inference_steps: int) -> None:
        super().set_timesteps(num_inference_steps)
        self.previous: tuple[int, np.ndarray] | None = None  # (timestep, x0) of the last step

    def step(
        self,
        model_output: np.ndarray,
        timestep,
        sample: np.ndarray,
        *,
        variance_noise: np.ndarray | None = None,
    ) -> np.ndarray:
        """The previous timestep's sample; ``variance_noise`` (``[2, *shape]`` on a second-order
        step) replaces the drawn noise."""
        timestep = int(timestep)
        alpha_t, alpha_prev, prev = self.alphas(timestep)
        x0 = self.predicted_original(model_output, alpha_t, sample)
        with np.errstate(divide="ignore"):  # zero terminal SNR: log(0) is -inf, as in torch
            lamb = np.log((alpha_t / (1 - alpha_t)) ** 0.5)
            h = np.log((alpha_prev / (1 - alpha_prev)) ** 0.5) - lamb
        mult_sample = ((1 - alpha_prev) / (1 - alpha_t)) ** 0.5 * np.exp(-h)
        mult_x0 = np.expm1(-2 * h) * alpha_prev**0.5
        mult_noise = (1 - alpha_prev) ** 0.5 * (1 - np.exp(-2 * h)) ** 0.5
        second_order = self.previous is not None and prev >= 0
        draws = iter(() if variance_noise is None else np.asarray(variance_noise, F32))

        def noise() -> np.ndarray:
            return self.noise(sample.shape, next(draws, None))

        step_noise = noise()
        denoised = x0
        if second_order:
            timestep_back, old_x0 = self.previous
            alpha_back = self.alphas_cumprod[timestep_back]
            with np.errstate(divide="ignore"):
                r = (lamb - np.log((alpha_back / (1 - alpha_back)) ** 0.5)) / h
            denoised = F32(1 + 1 / (2 * r)) * x0 - F32(1 / (2 * r)) * old_x0
            step_noise = noise()
        self.previous = (timestep, x0)
        prev_sample = F32(mult_sample) * sample - F32(mult_x0) * denoised
        return (prev_sample + F32(mult_noise) * step_noise).astype(F32)
