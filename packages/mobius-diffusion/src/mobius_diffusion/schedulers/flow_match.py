"""Flow matching (Flux, SD3, Sana, Wan...): Euler steps of the ODE over shifted sigmas."""

from __future__ import annotations

from typing import Any

import numpy as np

from mobius_diffusion.schedulers import sigmas as schedules
from mobius_diffusion.schedulers.base import F32, Scheduler


class FlowMatchEulerDiscreteScheduler(Scheduler):
    """Euler steps of a flow-matching ODE over shifted sigmas; with ``stochastic_sampling``,
    each step re-noises x0 to the next sigma with seeded noise instead."""

    defaults = dict(
        num_train_timesteps=1000,
        shift=1.0,
        use_dynamic_shifting=False,
        base_shift=0.5,
        max_shift=1.15,
        base_image_seq_len=256,
        max_image_seq_len=4096,
        invert_sigmas=False,
        shift_terminal=None,
        use_karras_sigmas=False,
        use_exponential_sigmas=False,
        use_beta_sigmas=False,
        time_shift_type="exponential",
        stochastic_sampling=False,
    )
    supported = dict(
        use_beta_sigmas=(False, None),
        time_shift_type=("exponential", "linear"),
    )
    init_noise_sigma = 1.0

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        n = self.config["num_train_timesteps"]
        timesteps = np.linspace(1, n, n, dtype=F32)[::-1].copy()
        sigmas = timesteps / F32(n)
        self.shift = self.config["shift"]
        if not self.config["use_dynamic_shifting"]:
            sigmas = schedules.shift(self.shift, sigmas).astype(F32)
        self.timesteps = (sigmas * F32(n)).astype(F32)
        self.sigmas = sigmas
        self.sigma_min, self.sigma_max = float(sigmas[-1]), float(sigmas[0])

    def set_timesteps(
        self,
        num_inference_steps: int | None = None,
        sigmas: list[float] | np.ndarray | None = None,
        mu: float | None = None,
    ) -> None:
        """As diffusers': ``sigmas`` (Flux passes its own) or ``num_inference_steps`` evenly spaced."""
        c, n = self.config, self.config["num_train_timesteps"]
        if c["use_dynamic_shifting"] and mu is None:
            raise ValueError("mu must be passed when use_dynamic_shifting is set")
        if sigmas is None:
            timesteps = np.linspace(self.sigma_max * n, self.sigma_min * n, num_inference_steps)
            sigmas = timesteps / n
        else:
            sigmas = np.asarray(sigmas).astype(F32)
        steps = self.num_inference_steps = len(sigmas)
        sigmas = schedules.shifted_flow_sigmas(c, sigmas, mu, self.shift)
        if c["use_karras_sigmas"]:
            sigmas = schedules.karras_sigmas(sigmas, steps, c)
        elif c["use_exponential_sigmas"]:
            sigmas = schedules.exponential_sigmas(sigmas, steps, c)
        sigmas = np.asarray(sigmas).astype(F32)
        last = F32(0.0)
        if c["invert_sigmas"]:
            sigmas, last = (F32(1.0) - sigmas).astype(F32), F32(1.0)
        self.timesteps = (sigmas * F32(n)).astype(F32)
        self.sigmas = np.concatenate([sigmas, [last]]).astype(F32)
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
        """The sample at the next sigma (``variance_noise``/``generator``: stochastic sampling)."""
        if self._step_index is None:
            self._init_step_index(timestep)
        sample = sample.astype(F32)
        sigma, sigma_next = self.sigmas[self._step_index], self.sigmas[self._step_index + 1]
        if self.config["stochastic_sampling"]:
            x0 = sample - sigma * model_output
            noise = self.noise(sample.shape, variance_noise, generator)
            prev_sample = (1.0 - sigma_next) * x0 + sigma_next * noise
        else:
            prev_sample = sample + (sigma_next - sigma) * model_output
        self._step_index += 1
        return prev_sample.astype(model_output.dtype)

    def scale_noise(self, sample: np.ndarray, timestep, noise: np.ndarray) -> np.ndarray:
        """``sample`` moved along the flow to ``timestep``: ``sigma * noise + (1 - sigma) * sample``
        (image-to-image's start, inpainting's re-noised original), at diffusers' noise level."""
        sigma = self.sigmas[self.noise_level_index(timestep)]
        return (sigma * noise + (F32(1.0) - sigma) * sample).astype(F32)
