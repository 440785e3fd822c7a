"""DDPM (Kandinsky 2.2's decoder) and unCLIP's DDPM variant (the Kandinsky and Karlo priors).

Both step from ``alphas_cumprod`` at one timestep to that at the previous one, through
the predicted original sample, and add seeded noise at every step but the one from
timestep 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mobius_diffusion.schedulers.base import (
    BETA_SCHEDULE_DEFAULTS,
    F32,
    DDPMFamily,
    Scheduler,
    betas,
)
from mobius_diffusion.schedulers.ddim import ddim_timesteps


def _posterior_step(alpha_t, alpha_prev, beta, alpha, original, sample):
    """The mean of q(x_prev | x_t, x_0): diffusers' two coefficients, in float32."""
    beta_t, beta_prev = F32(1.0) - alpha_t, F32(1.0) - alpha_prev
    original_coeff = (alpha_prev**0.5 * beta) / beta_t
    sample_coeff = alpha**0.5 * beta_prev / beta_t
    return original_coeff * original + sample_coeff * sample


def _original(config: dict, model_output, sample, alpha_t):
    """The predicted original sample (clipped when ``clip_sample``)."""
    beta_t = F32(1.0) - alpha_t
    kind = config["prediction_type"]
    if kind == "epsilon":
        original = (sample - beta_t**0.5 * model_output) / alpha_t**0.5
    elif kind == "sample":
        original = model_output
    else:  # v_prediction
        original = (alpha_t**0.5) * sample - (beta_t**0.5) * model_output
    if config["clip_sample"]:
        limit = config["clip_sample_range"]
        original = np.clip(original, -limit, limit).astype(original.dtype)
    return original


class DDPMScheduler(DDPMFamily):
    """diffusers' ``DDPMScheduler``: ``fixed_small``/``fixed_small_log``/``fixed_large`` variance,
    or ``learned_range`` (the model's second half of channels interpolates the log variance)."""

    defaults = dict(
        BETA_SCHEDULE_DEFAULTS,
        variance_type="fixed_small",
        clip_sample=True,
        prediction_type="epsilon",
        thresholding=False,
        dynamic_thresholding_ratio=0.995,
        clip_sample_range=1.0,
        sample_max_value=1.0,
        timestep_spacing="leading",
        steps_offset=0,
        rescale_betas_zero_snr=False,
    )
    supported = dict(
        variance_type=("fixed_small", "fixed_small_log", "fixed_large", "learned_range"),
        prediction_type=("epsilon", "sample", "v_prediction"),
        thresholding=(False,),
        timestep_spacing=("linspace", "leading", "trailing"),
        rescale_betas_zero_snr=(False,),
    )
    init_noise_sigma = F32(1.0)

    def set_timesteps(self, num_inference_steps: int) -> None:
        if num_inference_steps > self.config["num_train_timesteps"]:
            raise ValueError("num_inference_steps cannot exceed num_train_timesteps")
        self.num_inference_steps = num_inference_steps
        self.timesteps = ddim_timesteps(self.config, num_inference_steps)

    def previous_timestep(self, timestep) -> int:
        """The next timestep of the schedule (-1 after the last), or ``timestep - 1`` before one is set."""
        if self.num_inference_steps is None:
            return int(timestep) - 1
        index = int(np.nonzero(self.timesteps == timestep)[0][0])
        return -1 if index == len(self.timesteps) - 1 else int(self.timesteps[index + 1])

    def step(
        self,
        model_output: np.ndarray,
        timestep,
        sample: np.ndarray,
        variance_noise: np.ndarray | None = None,
        generator: np.random.Generator | None = None,
    ) -> np.ndarray:
        t, prev = int(timestep), self.previous_timestep(timestep)
        learned = self.config["variance_type"] == "learned_range"
        predicted_variance = None
        if learned and model_output.shape[1] == 2 * sample.shape[1]:
            model_output, predicted_variance = np.split(model_output, 2, axis=1)
        alpha_t = self.alphas_cumprod[t]
        alpha_prev = self.alphas_cumprod[prev] if prev >= 0 else F32(1.0)
        alpha = alpha_t / alpha_prev
        beta = F32(1.0) - alpha
        original = _original(self.config, model_output, sample, alpha_t)
        prev_sample = _posterior_step(alpha_t, alpha_prev, beta, alpha, original, sample)
        if t > 0:
            noise = self.noise(model_output.shape, variance_noise, generator)
            prev_sample = (
                prev_sample + self._std(alpha_t, alpha_prev, beta, predicted_variance) * noise
            )
        return prev_sample.astype(F32)

    def _std(self, alpha_t, alpha_prev, beta, predicted_variance):
        """The noise's scale (diffusers' ``_get_variance`` and how ``step`` applies it)."""
        variance = (F32(1.0) - alpha_prev) / (F32(1.0) - alpha_t) * beta
        variance = np.maximum(variance, F32(1e-20))
        kind = self.config["variance_type"]
        if kind == "fixed_small_log":
            return np.exp(F32(0.5) * np.log(variance))
        if kind == "fixed_large":
            return beta**0.5
        if kind == "learned_range":
            frac = (predicted_variance + F32(1.0)) / F32(2.0)
            log_variance = frac * np.log(beta) + (F32(1.0) - frac) * np.log(variance)
            return np.exp(F32(0.5) * log_variance)
        return variance**0.5  # fixed_small


class UnCLIPScheduler(Scheduler):
    """diffusers' ``UnCLIPScheduler`` (``fixed_small_log`` variance, the squared-cosine betas):
    ``num_inference_steps`` timesteps rounded from an even spacing of ``[0, T - 1]``; each step
    is told the next timestep (``prev_timestep``), as the prior pipelines pass it."""

    defaults = dict(
        num_train_timesteps=1000,
        variance_type="fixed_small_log",
        clip_sample=True,
        clip_sample_range=1.0,
        prediction_type="epsilon",
        beta_schedule="squaredcos_cap_v2",
    )
    supported = dict(
        variance_type=("fixed_small_log",),
        prediction_type=("epsilon", "sample"),
        beta_schedule=("squaredcos_cap_v2",),
    )
    init_noise_sigma = F32(1.0)

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        n = self.config["num_train_timesteps"]
        schedule = dict(
            BETA_SCHEDULE_DEFAULTS, num_train_timesteps=n, beta_schedule="squaredcos_cap_v2"
        )
        self.betas = betas(schedule)
        self.alphas = (F32(1.0) - self.betas).astype(F32)
        # torch's cumprod accumulates float32 in float64, rounding each product once.
        self.alphas_cumprod = np.cumprod(self.alphas.astype(np.float64)).astype(F32)

    def set_timesteps(self, num_inference_steps: int) -> None:
        if num_inference_steps < 2:  # diffusers divides by num_inference_steps - 1
            raise ValueError("UnCLIPScheduler needs at least 2 inference steps")
        self.num_inference_steps = num_inference_steps
        ratio = (self.config["num_train_timesteps"] - 1) / (num_inference_steps - 1)
        self.timesteps = (np.arange(0, num_inference_steps) * ratio).round()[::-1].astype(np.int64)

    def step(
        self,
        model_output: np.ndarray,
        timestep,
        sample: np.ndarray,
        prev_timestep: int | None = None,
        variance_noise: np.ndarray | None = None,
        generator: np.random.Generator | None = None,
    ) -> np.ndarray:
        t = int(timestep)
        prev = t - 1 if prev_timestep is None else int(prev_timestep)
        alpha_t = self.alphas_cumprod[t]
        alpha_prev = self.alphas_cumprod[prev] if prev >= 0 else F32(1.0)
        if prev == t - 1:
            beta, alpha = self.betas[t], self.alphas[t]
        else:
            beta = F32(1.0) - alpha_t / alpha_prev
            alpha = F32(1.0) - beta
        original = _original(self.config, model_output, sample, alpha_t)
        prev_sample = _posterior_step(alpha_t, alpha_prev, beta, alpha, original, sample)
        if t > 0:
            noise = self.noise(model_output.shape, variance_noise, generator)
            variance = (F32(1.0) - alpha_prev) / (F32(1.0) - alpha_t) * beta
            std = np.exp(F32(0.5) * np.log(np.maximum(variance, F32(1e-20))))
            prev_sample = prev_sample + std * noise
        return prev_sample.astype(F32)
