"""What the multistep solvers share: their timestep spacing and DPM-Solver++'s updates.

DPM-Solver++ (Lu et al. 2022) is written in ``lambda = log(alpha_t / sigma_t)``; a
class says how a noise level ``sigma`` maps to ``(alpha_t, sigma_t)`` (:meth:`alpha_sigma`)
and how a model output becomes x0 (:meth:`convert_model_output`). The SDE variant adds
``sigma_t * sqrt(1 - exp(-2h)) * noise`` with noise from :meth:`Scheduler.noise`.
"""

from __future__ import annotations

import numpy as np

from mobius_diffusion.schedulers.base import F32, Scheduler


def multistep_timesteps(config: dict, steps: int, last_timestep: int | None = None) -> np.ndarray:
    """DPM-Solver's and UniPC's ``steps`` int64 timesteps (``steps + 1`` spaced, the last dropped)."""
    n = config["num_train_timesteps"]
    last = n if last_timestep is None else last_timestep
    spacing = config["timestep_spacing"]
    if spacing == "linspace":
        return np.linspace(0, last - 1, steps + 1).round()[::-1][:-1].copy().astype(np.int64)
    if spacing == "leading":
        ratio = last // (steps + 1)
        timesteps = (np.arange(0, steps + 1) * ratio).round()[::-1][:-1].copy().astype(np.int64)
        return timesteps + config["steps_offset"]
    ratio = n / steps
    return np.arange(last, 0, -ratio).round().copy().astype(np.int64) - 1


def lambda_of(alpha: np.float32, sigma: np.float32) -> np.float32:
    """``log(alpha) - log(sigma)``: +inf at sigma 0 (the final step), as torch gives it."""
    with np.errstate(divide="ignore"):
        return np.log(alpha) - np.log(sigma)


class VPOrFlowSigmas:
    """Noise levels of a DDPM schedule (variance preserving) or, with ``use_flow_sigmas``,
    of flow matching: their ``(alpha_t, sigma_t)`` and the x0 a model output predicts."""

    def alpha_sigma(self, sigma: np.float32) -> tuple[np.float32, np.float32]:
        """Flow sigmas: ``(1 - sigma, sigma)``; else ``alpha_t = 1 / sqrt(sigma**2 + 1)``."""
        if self.config["use_flow_sigmas"]:
            return 1 - sigma, sigma
        alpha_t = 1 / (sigma**2 + 1) ** 0.5
        return alpha_t, sigma * alpha_t

    def add_noise(self, original: np.ndarray, noise: np.ndarray, timestep) -> np.ndarray:
        """``original`` at the noise level of ``timestep``: ``alpha_t x + sigma_t noise``."""
        alpha_t, sigma_t = self.alpha_sigma(self.sigmas[self.noise_level_index(timestep)])
        return (alpha_t * original + sigma_t * noise).astype(F32)

    def x0_prediction(self, model_output: np.ndarray, sample: np.ndarray) -> np.ndarray:
        """x0 of an epsilon / sample / v / flow prediction at the current sigma."""
        kind = self.config["prediction_type"]
        sigma = self.sigmas[self._step_index]
        alpha_t, sigma_t = self.alpha_sigma(sigma)
        if kind == "epsilon":
            return (sample - sigma_t * model_output) / alpha_t
        if kind == "sample":
            return model_output
        if kind == "v_prediction":
            return alpha_t * sample - sigma_t * model_output
        return sample - sigma * model_output  # flow_prediction


class DPMSolverPlusPlus(Scheduler):
    """The multistep DPM-Solver++ step (orders 1–3, midpoint/heun, ODE or SDE) over ``sigmas``.

    Subclasses set ``sigmas`` (with the final one), ``timesteps`` and define
    :meth:`alpha_sigma` and :meth:`convert_model_output`.
    """

    def reset_history(self) -> None:
        """Forget the previous steps' x0 (on ``set_timesteps``)."""
        self.model_outputs: list = [None] * self.config["solver_order"]
        self.lower_order_nums = 0
        self._step_index = None

    def alpha_sigma(self, sigma: np.float32) -> tuple[np.float32, np.float32]:
        """``(alpha_t, sigma_t)`` of the noise level ``sigma``."""
        raise NotImplementedError

    def convert_model_output(self, model_output: np.ndarray, sample: np.ndarray) -> np.ndarray:
        """The x0 the model output predicts at the current step."""
        raise NotImplementedError

    def _levels(self, *offsets: int) -> list[tuple[np.float32, np.float32, np.float32]]:
        """``(alpha, sigma, lambda)`` at ``step_index + offset`` for each offset."""
        levels = []
        for offset in offsets:
            alpha, sigma = self.alpha_sigma(self.sigmas[self._step_index + offset])
            levels.append((alpha, sigma, lambda_of(alpha, sigma)))
        return levels

    def _first_order(self, m0, sample, noise):
        (alpha_t, sigma_t, lambda_t), (_, sigma_s, lambda_s) = self._levels(1, 0)
        h = lambda_t - lambda_s
        if noise is None:
            return sigma_t / sigma_s * sample - alpha_t * (np.exp(-h) - 1.0) * m0
        return (
            sigma_t / sigma_s * np.exp(-h) * sample
            + alpha_t * (1 - np.exp(-2.0 * h)) * m0
            + sigma_t * np.sqrt(1.0 - np.exp(-2 * h)) * noise
        )

    def _second_order(self, sample, noise):
        (alpha_t, sigma_t, lambda_t), (_, sigma_s0, lambda_s0), (_, _, lambda_s1) = self._levels(
            1, 0, -1
        )
        m0, m1 = self.model_outputs[-1], self.model_outputs[-2]
        h, h_0 = lambda_t - lambda_s0, lambda_s0 - lambda_s1
        r0 = h_0 / h
        d0, d1 = m0, 1.0 / r0 * (m0 - m1)
        midpoint = self.config["solver_type"] == "midpoint"
        if noise is None:
            x_t = sigma_t / sigma_s0 * sample - alpha_t * (np.exp(-h) - 1.0) * d0
            if midpoint:
                return x_t - 0.5 * (alpha_t * (np.exp(-h) - 1.0)) * d1
            return x_t + alpha_t * ((np.exp(-h) - 1.0) / h + 1.0) * d1
        x_t = sigma_t / sigma_s0 * np.exp(-h) * sample + alpha_t * (1 - np.exp(-2.0 * h)) * d0
        if midpoint:
            x_t = x_t + 0.5 * (alpha_t * (1 - np.exp(-2.0 * h))) * d1
        else:
            x_t = x_t + alpha_t * ((1.0 - np.exp(-2.0 * h)) / (-2.0 * h) + 1.0) * d1
        return x_t + sigma_t * np.sqrt(1.0 - np.exp(-2 * h)) * noise

    def _third_order(self, sample, noise):
        levels = self._levels(1, 0, -1, -2)
        (alpha_t, sigma_t, lambda_t), (_, sigma_s0, lambda_s0) = levels[:2]
        lambda_s1, lambda_s2 = levels[2][2], levels[3][2]
        m0, m1, m2 = self.model_outputs[-1], self.model_outputs[-2], self.model_outputs[-3]
        h, h_0, h_1 = lambda_t - lambda_s0, lambda_s0 - lambda_s1, lambda_s1 - lambda_s2
        r0, r1 = h_0 / h, h_1 / h
        d1_0, d1_1 = 1.0 / r0 * (m0 - m1), 1.0 / r1 * (m1 - m2)
        d1 = d1_0 + r0 / (r0 + r1) * (d1_0 - d1_1)
        d2 = 1.0 / (r0 + r1) * (d1_0 - d1_1)
        if noise is None:
            return (
                sigma_t / sigma_s0 * sample
                - alpha_t * (np.exp(-h) - 1.0) * m0
                + alpha_t * ((np.exp(-h) - 1.0) / h + 1.0) * d1
                - alpha_t * ((np.exp(-h) - 1.0 + h) / h**2 - 0.5) * d2
            )
        return (
            sigma_t / sigma_s0 * np.exp(-h) * sample
            + alpha_t * (1.0 - np.exp(-2.0 * h)) * m0
            + alpha_t * ((1.0 - np.exp(-2.0 * h)) / (-2.0 * h) + 1.0) * d1
            + alpha_t * ((1.0 - np.exp(-2.0 * h) - 2.0 * h) / (2.0 * h) ** 2 - 0.5) * d2
            + sigma_t * np.sqrt(1.0 - np.exp(-2 * h)) * noise
        )

    def step(
        self,
        model_output: np.ndarray,
        timestep,
        sample: np.ndarray,
        *,
        generator: np.random.Generator | None = None,
        variance_noise: np.ndarray | None = None,
    ) -> np.ndarray:
        """The next sample, at the highest order the history allows (lower near the end).

        ``variance_noise`` (or a draw from ``generator``/``self.generator``) feeds the SDE variant.
        """
        if self.num_inference_steps is None:
            raise ValueError("call set_timesteps before step")
        if self._step_index is None:
            self._init_step_index(timestep)
        c, count, index = self.config, len(self.timesteps), self._step_index
        short = c["lower_order_final"] and count < 15
        lower_order_final = index == count - 1 and (
            c["euler_at_final"] or short or c["final_sigmas_type"] == "zero"
        )
        lower_order_second = index == count - 2 and short
        x0 = self.convert_model_output(model_output, sample)
        self.model_outputs = [*self.model_outputs[1:], x0]
        sample = sample.astype(F32)
        noise = None
        if c["algorithm_type"] == "sde-dpmsolver++":
            noise = self.noise(x0.shape, variance_noise, generator)
        with np.errstate(divide="ignore", invalid="ignore"):
            if c["solver_order"] == 1 or self.lower_order_nums < 1 or lower_order_final:
                prev_sample = self._first_order(x0, sample, noise)
            elif c["solver_order"] == 2 or self.lower_order_nums < 2 or lower_order_second:
                prev_sample = self._second_order(sample, noise)
            else:
                prev_sample = self._third_order(sample, noise)
        self.lower_order_nums = min(self.lower_order_nums + 1, c["solver_order"])
        self._step_index += 1
        return prev_sample.astype(F32)
