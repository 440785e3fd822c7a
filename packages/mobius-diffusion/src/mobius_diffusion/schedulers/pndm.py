"""PNDM (pseudo numerical methods): Runge–Kutta warm-up, then a four-step linear multistep."""

from __future__ import annotations

import numpy as np

from mobius_diffusion.schedulers.base import BETA_SCHEDULE_DEFAULTS, PreviousAlphaFamily


class PNDMScheduler(PreviousAlphaFamily):
    """PNDM: Runge–Kutta warm-up steps (unless ``skip_prk_steps``), then linear multistep."""

    defaults = dict(
        BETA_SCHEDULE_DEFAULTS,
        skip_prk_steps=False,
        set_alpha_to_one=False,
        prediction_type="epsilon",
        timestep_spacing="leading",
        steps_offset=0,
    )
    supported = dict(
        prediction_type=("epsilon", "v_prediction"),
        timestep_spacing=("linspace", "leading", "trailing"),
    )

    def set_timesteps(self, num_inference_steps: int) -> None:
        c, n = self.config, self.config["num_train_timesteps"]
        self.num_inference_steps = steps = num_inference_steps
        if c["timestep_spacing"] == "linspace":
            base = np.linspace(0, n - 1, steps).round().astype(np.int64)
        elif c["timestep_spacing"] == "leading":
            base = (np.arange(0, steps) * (n // steps)).round() + c["steps_offset"]
        else:
            base = np.round(np.arange(n, 0, -n / steps))[::-1].astype(np.int64) - 1
        if c["skip_prk_steps"]:
            self.prk_timesteps = np.array([])
            plms = np.concatenate([base[:-1], base[-2:-1], base[-1:]])[::-1].copy()
        else:
            prk = np.array(base[-4:]).repeat(2) + np.tile(np.array([0, n // steps // 2]), 4)
            self.prk_timesteps = prk[:-1].repeat(2)[1:-1][::-1].copy()
            plms = base[:-3][::-1].copy()
        self.plms_timesteps = plms
        self.timesteps = np.concatenate([self.prk_timesteps, plms]).astype(np.int64)
        self.ets: list[np.ndarray] = []
        self.counter = 0
        self.cur_model_output = 0
        self.cur_sample = None

    def step(self, model_output: np.ndarray, timestep, sample: np.ndarray) -> np.ndarray:
        if self.counter < len(self.prk_timesteps) and not self.config["skip_prk_steps"]:
            return self._step_prk(model_output, int(timestep), sample)
        return self._step_plms(model_output, int(timestep), sample)

    def _step_prk(self, model_output, timestep: int, sample):
        n = self.config["num_train_timesteps"]
        diff_to_prev = 0 if self.counter % 2 else n // self.num_inference_steps // 2
        prev = timestep - diff_to_prev
        timestep = int(self.prk_timesteps[self.counter // 4 * 4])
        phase = self.counter % 4
        if phase == 0:
            self.cur_model_output = self.cur_model_output + 1 / 6 * model_output
            self.ets.append(model_output)
            self.cur_sample = sample
        elif phase in (1, 2):
            self.cur_model_output = self.cur_model_output + 1 / 3 * model_output
        else:
            model_output = self.cur_model_output + 1 / 6 * model_output
            self.cur_model_output = 0
        current = self.cur_sample if self.cur_sample is not None else sample
        self.counter += 1
        return self._prev_sample(current, timestep, prev, model_output)

    def _step_plms(self, model_output, timestep: int, sample):
        n = self.config["num_train_timesteps"]
        prev = timestep - n // self.num_inference_steps
        if self.counter != 1:
            self.ets = self.ets[-3:]
            self.ets.append(model_output)
        else:
            prev, timestep = timestep, timestep + n // self.num_inference_steps
        ets = self.ets
        if len(ets) == 1 and self.counter == 0:
            self.cur_sample = sample
        elif len(ets) == 1 and self.counter == 1:
            model_output = (model_output + ets[-1]) / 2
            sample, self.cur_sample = self.cur_sample, None
        elif len(ets) == 2:
            model_output = (3 * ets[-1] - ets[-2]) / 2
        elif len(ets) == 3:
            model_output = (23 * ets[-1] - 16 * ets[-2] + 5 * ets[-3]) / 12
        else:
            model_output = (1 / 24) * (55 * ets[-1] - 59 * ets[-2] + 37 * ets[-3] - 9 * ets[-4])
        self.counter += 1
        return self._prev_sample(sample, timestep, prev, model_output)

    def _prev_sample(self, sample, timestep: int, prev: int, model_output):
        alpha_t, alpha_prev = self.alphas_cumprod[timestep], self.previous_alpha(prev)
        beta_t, beta_prev = 1 - alpha_t, 1 - alpha_prev
        if self.config["prediction_type"] == "v_prediction":
            model_output = (alpha_t**0.5) * model_output + (beta_t**0.5) * sample
        sample_coeff = (alpha_prev / alpha_t) ** 0.5
        denom = alpha_t * beta_prev**0.5 + (alpha_t * beta_t * alpha_prev) ** 0.5
        return sample_coeff * sample - (alpha_prev - alpha_t) * model_output / denom
