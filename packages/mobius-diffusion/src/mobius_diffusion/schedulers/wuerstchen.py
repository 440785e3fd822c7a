"""Würstchen's and Stable Cascade's DDPM sampler over a continuous cosine schedule."""

from __future__ import annotations

from typing import Any

import numpy as np

from mobius_diffusion.schedulers.base import F32, Scheduler, torch_linspace


class DDPMWuerstchenScheduler(Scheduler):
    """DDPM steps between timestep ratios in [0, 1] (1: pure noise), ``num_inference_steps + 1``
    of them evenly spaced; the pipelines run every one but the last (0). Each step but the
    one landing on 0 adds seeded noise.

    The noise level is ``alpha_cumprod(t) = cos²((t + s) / (1 + s) · π/2) / cos²(s / (1 + s) ·
    π/2)``, clamped to [1e-4, 0.9999]; ``scaler`` warps ``t`` first (``1 - (1 - t)^scaler``
    above 1, ``t^scaler`` below).
    """

    defaults = dict(scaler=1.0, s=0.008)
    init_noise_sigma = F32(1.0)

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.s = F32(self.config["s"])
        self.init_alpha_cumprod = self._cos2(F32(0.0))

    def _cos2(self, t) -> np.ndarray:
        """``cos((t + s) / (1 + s) * pi / 2) ** 2`` in float32, the cosine rounded once."""
        angle = (t + self.s) / (F32(1.0) + self.s) * F32(np.pi) * F32(0.5)
        cos = np.cos(np.asarray(angle, dtype=np.float64)).astype(F32)
        return cos * cos

    def alpha_cumprod(self, t) -> np.ndarray:
        """The noise level at ratio ``t`` (float32), as diffusers' ``_alpha_cumprod``."""
        t = np.asarray(t, dtype=F32)
        scaler = self.config["scaler"]
        if scaler > 1:
            t = F32(1.0) - (F32(1.0) - t) ** F32(scaler)
        elif scaler < 1:
            t = t ** F32(scaler)
        return np.clip(self._cos2(t) / self.init_alpha_cumprod, F32(0.0001), F32(0.9999))

    def set_timesteps(
        self, num_inference_steps: int | None = None, timesteps: list[float] | None = None
    ) -> None:
        """``num_inference_steps + 1`` ratios from 1 to 0, or the ``timesteps`` given."""
        if timesteps is None:
            self.timesteps = torch_linspace(1.0, 0.0, num_inference_steps + 1)
        else:
            self.timesteps = np.asarray(timesteps, dtype=F32)
        self.num_inference_steps = len(self.timesteps) - 1

    def previous_timestep(self, timestep) -> np.float32:
        """The ratio after ``timestep`` in the schedule (diffusers: the nearest one's next)."""
        index = int(np.abs(self.timesteps - F32(np.ravel(timestep)[0])).argmin())
        return self.timesteps[index + 1]

    def step(
        self,
        model_output: np.ndarray,
        timestep,
        sample: np.ndarray,
        *,
        generator: np.random.Generator | None = None,
        variance_noise: np.ndarray | None = None,
    ) -> np.ndarray:
        """The sample at the next ratio: the DDPM posterior mean, plus noise unless that is 0."""
        t = F32(np.ravel(timestep)[0])
        prev_t = self.previous_timestep(t)
        alpha_cumprod, alpha_cumprod_prev = self.alpha_cumprod(t), self.alpha_cumprod(prev_t)
        alpha = alpha_cumprod / alpha_cumprod_prev
        one = F32(1.0)
        mu = np.sqrt(one / alpha) * (
            sample - (one - alpha) * model_output / np.sqrt(one - alpha_cumprod)
        )
        if prev_t == 0:  # diffusers multiplies the noise by 0 here; none is drawn
            return mu.astype(model_output.dtype)
        noise = self.noise(sample.shape, variance_noise, generator)
        std = np.sqrt((one - alpha) * (one - alpha_cumprod_prev) / (one - alpha_cumprod))
        return (mu + std * noise).astype(model_output.dtype)

    def add_noise(self, original: np.ndarray, noise: np.ndarray, timestep) -> np.ndarray:
        """``original`` noised to ratio ``timestep``: ``sqrt(a) x + sqrt(1 - a) noise``."""
        alpha_cumprod = self.alpha_cumprod(F32(np.ravel(timestep)[0]))
        return (
            np.sqrt(alpha_cumprod) * original + np.sqrt(F32(1.0) - alpha_cumprod) * noise
        ).astype(F32)
