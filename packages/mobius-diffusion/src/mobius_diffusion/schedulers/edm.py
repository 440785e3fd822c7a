"""The EDM family (Karras et al. 2022): noise levels from ``sigma_min`` to ``sigma_max``, the
model preconditioned by ``c_in``/``c_skip``/``c_out`` and fed ``c_noise = log(sigma) / 4``
as its timestep.

The runner calls ``scale_model_input`` (which applies ``precondition_inputs``) and feeds
the model the scheduler's ``timesteps`` (already ``c_noise``); ``step`` applies
``precondition_outputs`` to turn the model output into x0.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mobius_diffusion.schedulers.base import F32, Scheduler, torch_linspace
from mobius_diffusion.schedulers.multistep import DPMSolverPlusPlus

_EDM_DEFAULTS: dict[str, Any] = dict(
    sigma_min=0.002,
    sigma_max=80.0,
    sigma_data=0.5,
    sigma_schedule="karras",
    num_train_timesteps=1000,
    prediction_type="epsilon",
    rho=7.0,
    final_sigmas_type="zero",
)


class _EDMFamily(Scheduler):
    """The EDM preconditioning and noise schedules both EDM schedulers share."""

    supported = dict(
        sigma_schedule=("karras", "exponential"),
        prediction_type=("epsilon", "v_prediction"),
        final_sigmas_type=("zero", "sigma_min"),
    )

    @property
    def init_noise_sigma(self) -> float:
        return (self.config["sigma_max"] ** 2 + 1) ** 0.5

    def karras(self, ramp: np.ndarray) -> np.ndarray:
        """Karras noise levels at ``ramp`` in [0, 1] (in ``ramp``'s dtype, as torch computes)."""
        c = self.config
        min_inv_rho = c["sigma_min"] ** (1 / c["rho"])
        max_inv_rho = c["sigma_max"] ** (1 / c["rho"])
        return (max_inv_rho + ramp * (min_inv_rho - max_inv_rho)) ** c["rho"]

    def exponential(self, steps: int) -> np.ndarray:
        """``steps`` noise levels evenly spaced in log, descending (float32, as torch's linspace)."""
        c = self.config
        logs = torch_linspace(math.log(c["sigma_min"]), math.log(c["sigma_max"]), steps)
        return np.exp(logs)[::-1].copy()

    @staticmethod
    def precondition_noise(sigmas: np.ndarray) -> np.ndarray:
        """``c_noise = log(sigma) / 4``: what the model takes as its timestep."""
        return (F32(0.25) * np.log(sigmas)).astype(F32)

    def precondition_inputs(self, sample: np.ndarray, sigma: np.float32) -> np.ndarray:
        """``sample * c_in`` with ``c_in = 1 / (sigma**2 + sigma_data**2) ** 0.5``."""
        return sample * (1 / (sigma**2 + self.config["sigma_data"] ** 2) ** 0.5)

    def precondition_outputs(self, sample, model_output, sigma) -> np.ndarray:
        """x0 = ``c_skip * sample + c_out * model_output``."""
        sigma_data = self.config["sigma_data"]
        c_skip = sigma_data**2 / (sigma**2 + sigma_data**2)
        sign = -sigma if self.config["prediction_type"] == "v_prediction" else sigma
        c_out = sign * sigma_data / (sigma**2 + sigma_data**2) ** 0.5
        return c_skip * sample + c_out * model_output

    def scale_model_input(self, sample: np.ndarray, timestep) -> np.ndarray:
        """The preconditioned model input at the current sigma."""
        if self._step_index is None:
            self._init_step_index(timestep)
        return self.precondition_inputs(sample, self.sigmas[self._step_index]).astype(F32)


class EDMEulerScheduler(_EDMFamily):
    """Euler steps over EDM noise levels (``s_churn`` 0: deterministic)."""

    defaults = _EDM_DEFAULTS

    def set_timesteps(self, num_inference_steps: int) -> None:
        """``num_inference_steps`` noise levels (float64 ramp, rounded to float32) and ``c_noise``."""
        self.num_inference_steps = num_inference_steps
        ramp = np.linspace(0, 1, num_inference_steps)
        if self.config["sigma_schedule"] == "karras":
            sigmas = self.karras(ramp).astype(F32)
        else:
            sigmas = self.exponential(num_inference_steps)
        self.timesteps = self.precondition_noise(sigmas)
        last = sigmas[-1] if self.config["final_sigmas_type"] == "sigma_min" else 0
        self.sigmas = np.concatenate([sigmas, [last]]).astype(F32)
        self._step_index = None

    def step(self, model_output: np.ndarray, timestep, sample: np.ndarray) -> np.ndarray:
        """The sample at the next noise level: one Euler step along ``(sample - x0) / sigma``."""
        if self._step_index is None:
            self._init_step_index(timestep)
        sample = sample.astype(F32)
        sigma = self.sigmas[self._step_index]
        sigma_hat = sigma * (0.0 + 1)  # gamma 0
        pred_original = self.precondition_outputs(sample, model_output, sigma_hat)
        derivative = (sample - pred_original) / sigma_hat
        dt = self.sigmas[self._step_index + 1] - sigma_hat
        self._step_index += 1
        return (sample + derivative * dt).astype(model_output.dtype)


class EDMDPMSolverMultistepScheduler(_EDMFamily, DPMSolverPlusPlus):
    """DPM-Solver++ (orders 1–3; SDE variant orders 1–2) over EDM noise levels (alpha_t = 1)."""

    defaults = dict(
        _EDM_DEFAULTS,
        solver_order=2,
        thresholding=False,
        dynamic_thresholding_ratio=0.995,
        sample_max_value=1.0,
        algorithm_type="dpmsolver++",
        solver_type="midpoint",
        lower_order_final=True,
        euler_at_final=False,
    )
    remapped = dict(
        algorithm_type={"deis": "dpmsolver++"},
        solver_type={"logrho": "midpoint", "bh1": "midpoint", "bh2": "midpoint"},
    )
    supported = dict(
        _EDMFamily.supported,
        solver_order=(1, 2, 3),
        thresholding=(False,),
        algorithm_type=("dpmsolver++", "sde-dpmsolver++"),
        solver_type=("midpoint", "heun"),
    )

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        if self.config["algorithm_type"] == "sde-dpmsolver++" and self.config["solver_order"] == 3:
            # diffusers has no third-order SDE update for EDM (its step fails there)
            self.refuse("solver_order=3 with algorithm_type='sde-dpmsolver++'")
        self.reset_history()

    def set_timesteps(self, num_inference_steps: int) -> None:
        """``num_inference_steps`` noise levels (float32 ramp, as torch's) and ``c_noise``."""
        self.num_inference_steps = num_inference_steps
        if self.config["sigma_schedule"] == "karras":
            sigmas = self.karras(torch_linspace(0, 1, num_inference_steps)).astype(F32)
        else:
            sigmas = self.exponential(num_inference_steps)
        self.timesteps = self.precondition_noise(sigmas)
        last = self.config["sigma_min"] if self.config["final_sigmas_type"] == "sigma_min" else 0
        self.sigmas = np.concatenate([sigmas, np.array([last], dtype=F32)]).astype(F32)
        self.reset_history()

    def alpha_sigma(self, sigma: np.float32) -> tuple[np.float32, np.float32]:
        """EDM's sample is ``x0 + sigma * noise``: alpha 1."""
        return F32(1.0), sigma

    def convert_model_output(self, model_output: np.ndarray, sample: np.ndarray) -> np.ndarray:
        """x0 from the preconditioned model output at the current sigma."""
        return self.precondition_outputs(sample, model_output, self.sigmas[self._step_index])
