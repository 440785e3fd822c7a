"""UniPC (Zhao et al. 2023): a multistep predictor, and a corrector that reuses each new
model output on the previous step (SD, SDXL, Wan, Sana configs)."""

from __future__ import annotations

from typing import Any

import numpy as np

from mobius_diffusion.schedulers import sigmas as schedules
from mobius_diffusion.schedulers.base import BETA_SCHEDULE_DEFAULTS, F32, DDPMFamily
from mobius_diffusion.schedulers.multistep import VPOrFlowSigmas, lambda_of, multistep_timesteps


class UniPCMultistepScheduler(VPOrFlowSigmas, DDPMFamily):
    """UniPC with the B(h) variants bh1/bh2, data (``predict_x0``) or noise prediction, over a
    DDPM schedule, Karras/exponential sigmas or (shifted) flow-matching sigmas."""

    defaults = dict(
        BETA_SCHEDULE_DEFAULTS,
        solver_order=2,
        prediction_type="epsilon",
        thresholding=False,
        dynamic_thresholding_ratio=0.995,
        sample_max_value=1.0,
        predict_x0=True,
        solver_type="bh2",
        lower_order_final=True,
        disable_corrector=(),
        solver_p=None,
        use_karras_sigmas=False,
        use_exponential_sigmas=False,
        use_beta_sigmas=False,
        use_flow_sigmas=False,
        flow_shift=1.0,
        timestep_spacing="linspace",
        steps_offset=0,
        final_sigmas_type="zero",
        rescale_betas_zero_snr=False,
        use_dynamic_shifting=False,
        time_shift_type="exponential",
        sigma_min=None,
        sigma_max=None,
        shift_terminal=None,
    )
    remapped = dict(solver_type={"midpoint": "bh2", "heun": "bh2", "logrho": "bh2"})
    supported = dict(
        prediction_type=("epsilon", "sample", "v_prediction", "flow_prediction"),
        thresholding=(False,),
        solver_type=("bh1", "bh2"),
        solver_p=(None,),
        use_beta_sigmas=(False, None),
        timestep_spacing=("linspace", "leading", "trailing"),
        final_sigmas_type=("zero", "sigma_min"),
        rescale_betas_zero_snr=(False,),
        time_shift_type=("exponential", "linear"),
    )
    init_noise_sigma = 1.0

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        c = self.config
        if c["shift_terminal"] is not None and not c["use_flow_sigmas"]:
            raise ValueError("shift_terminal is only taken with use_flow_sigmas")
        if not c["predict_x0"] and c["prediction_type"] == "flow_prediction":
            self.refuse("predict_x0=False with prediction_type='flow_prediction'")
        if c["final_sigmas_type"] == "zero":
            # diffusers' last step to sigma 0 multiplies inf by 0 here (NaN samples): refused
            if c["solver_type"] == "bh1":
                self.refuse("solver_type='bh1' with final_sigmas_type='zero'")
            if not c["predict_x0"]:
                self.refuse("predict_x0=False with final_sigmas_type='zero'")
        self._reset_history()

    def _reset_history(self) -> None:
        self.model_outputs: list = [None] * self.config["solver_order"]
        self.lower_order_nums = 0
        self.last_sample = None
        self.this_order = 1
        self._step_index = None

    def set_timesteps(
        self,
        num_inference_steps: int | None = None,
        sigmas: list[float] | np.ndarray | None = None,
        mu: float | None = None,
    ) -> None:
        """The timesteps and sigmas; ``sigmas`` (flow sigmas only) and ``mu`` as diffusers takes them."""
        c, n = self.config, self.config["num_train_timesteps"]
        if c["use_dynamic_shifting"] and mu is None:
            raise ValueError("mu must be passed when use_dynamic_shifting is set")
        if sigmas is not None:
            if not c["use_flow_sigmas"]:
                raise ValueError("sigmas are only taken with use_flow_sigmas")
            sigmas = np.array(sigmas)
            num_inference_steps = len(sigmas)
        timesteps = multistep_timesteps(c, num_inference_steps)
        if c["use_karras_sigmas"] or c["use_exponential_sigmas"]:
            sigmas = self.train_sigmas() if sigmas is None else sigmas
            log_sigmas = np.log(sigmas)
            convert = (
                schedules.karras_sigmas if c["use_karras_sigmas"] else schedules.exponential_sigmas
            )
            sigmas = convert(np.flip(sigmas).copy(), num_inference_steps, c)
            if c["use_karras_sigmas"] and c["use_flow_sigmas"]:
                sigmas = sigmas / (sigmas + 1)
                timesteps = (sigmas * n).copy()
            else:
                timesteps = schedules.sigmas_to_t(sigmas, log_sigmas)
                if c["use_karras_sigmas"]:
                    timesteps = timesteps.round()
            last = sigmas[-1]
        elif c["use_flow_sigmas"]:
            if sigmas is None:
                sigmas = np.linspace(1, 1 / n, num_inference_steps + 1)[:-1]
            sigmas = schedules.shifted_flow_sigmas(c, sigmas, mu, c["flow_shift"])
            if np.fabs(sigmas[0] - 1) < 1e-6:  # keep alpha_t = 1 - sigma off zero
                sigmas[0] -= 1e-6
            timesteps = (sigmas * n).copy()
            last = sigmas[-1]
        else:
            sigmas = self.train_sigmas() if sigmas is None else sigmas
            sigmas = np.interp(timesteps, np.arange(0, len(sigmas)), sigmas)
            last = ((1 - self.alphas_cumprod[0]) / self.alphas_cumprod[0]) ** 0.5
        last = last if c["final_sigmas_type"] == "sigma_min" else 0
        self.sigmas = np.concatenate([sigmas, [last]]).astype(F32)
        self.timesteps = timesteps.astype(np.int64)
        self.num_inference_steps = len(timesteps)
        self._reset_history()

    def convert_model_output(self, model_output: np.ndarray, sample: np.ndarray) -> np.ndarray:
        """x0 (``predict_x0``) or epsilon from the model output at the current sigma."""
        if self.config["predict_x0"]:
            return self.x0_prediction(model_output, sample)
        kind = self.config["prediction_type"]
        alpha_t, sigma_t = self.alpha_sigma(self.sigmas[self._step_index])
        if kind == "epsilon":
            return model_output
        if kind == "sample":
            return (sample - alpha_t * model_output) / sigma_t
        return alpha_t * model_output + sigma_t * sample  # v_prediction

    def _update(self, target: int, source: int, order: int, x: np.ndarray):
        """What predictor and corrector share, from sigma index ``source`` to ``target``.

        Returns ``x_t_`` (the first-order step of ``x``), ``scale`` (alpha_t or sigma_t times
        B(h)), the coefficients ``R``/``b`` of the order conditions and the divided
        differences ``D1s`` of the older model outputs.
        """
        alpha_t, sigma_t = self.alpha_sigma(self.sigmas[target])
        alpha_s0, sigma_s0 = self.alpha_sigma(self.sigmas[source])
        lambda_s0 = lambda_of(alpha_s0, sigma_s0)
        h = lambda_of(alpha_t, sigma_t) - lambda_s0
        m0 = self.model_outputs[-1]
        rks, d1s = [], []
        for i in range(1, order):
            alpha_si, sigma_si = self.alpha_sigma(self.sigmas[source - i])
            rk = (lambda_of(alpha_si, sigma_si) - lambda_s0) / h
            rks.append(rk)
            d1s.append((self.model_outputs[-(i + 1)] - m0) / rk)
        rks = np.array([*rks, 1.0], dtype=F32)
        x0_form = self.config["predict_x0"]
        hh = -h if x0_form else h
        h_phi_1 = np.expm1(hh)
        h_phi_k = h_phi_1 / hh - 1
        b_h = hh if self.config["solver_type"] == "bh1" else np.expm1(hh)
        factorial, rows, b = 1, [], []
        for i in range(1, order + 1):
            rows.append(rks ** (i - 1))
            b.append(h_phi_k * factorial / b_h)
            factorial *= i + 1
            h_phi_k = h_phi_k / hh - 1 / factorial
        if x0_form:
            x_t_ = sigma_t / sigma_s0 * x - alpha_t * h_phi_1 * m0
            scale = alpha_t * b_h
        else:
            x_t_ = alpha_t / alpha_s0 * x - sigma_t * h_phi_1 * m0
            scale = sigma_t * b_h
        return x_t_, scale, np.stack(rows), np.array(b, dtype=F32), d1s

    def _predict(self, sample: np.ndarray, order: int) -> np.ndarray:
        """UniP: the sample at the next sigma from the last ``order`` model outputs."""
        index = self._step_index
        x_t_, scale, rows, b, d1s = self._update(index + 1, index, order, sample)
        if not d1s:  # first order: no older outputs to correct the slope with
            return x_t_.astype(F32)
        rhos = np.array([0.5], F32) if order == 2 else np.linalg.solve(rows[:-1, :-1], b[:-1])
        residual = sum(F32(r) * d for r, d in zip(rhos.astype(F32), d1s, strict=True))
        return (x_t_ - scale * residual).astype(F32)

    def _correct(self, model_output: np.ndarray, sample: np.ndarray, order: int) -> np.ndarray:
        """UniC: the current sample recomputed from the last one with the new model output."""
        index = self._step_index
        x_t_, scale, rows, b, d1s = self._update(index, index - 1, order, self.last_sample)
        rhos = np.array([0.5], F32) if order == 1 else np.linalg.solve(rows, b).astype(F32)
        residual = sum(F32(r) * d for r, d in zip(rhos[:-1], d1s, strict=True))
        d1_t = model_output - self.model_outputs[-1]
        return (x_t_ - scale * (residual + rhos[-1] * d1_t)).astype(F32)

    def step(self, model_output: np.ndarray, timestep, sample: np.ndarray) -> np.ndarray:
        """Correct the current sample with this model output (UniC), then predict the next (UniP)."""
        if self.num_inference_steps is None:
            raise ValueError("call set_timesteps before step")
        if self._step_index is None:
            self._init_step_index(timestep)
        c, index = self.config, self._step_index
        converted = self.convert_model_output(model_output, sample)
        with np.errstate(divide="ignore", invalid="ignore"):
            if (
                index > 0
                and index - 1 not in c["disable_corrector"]
                and self.last_sample is not None
            ):
                sample = self._correct(converted, sample, self.this_order)
            self.model_outputs = [*self.model_outputs[1:], converted]
            order = c["solver_order"]
            if c["lower_order_final"]:
                order = min(order, len(self.timesteps) - index)
            self.this_order = min(order, self.lower_order_nums + 1)
            self.last_sample = sample
            prev_sample = self._predict(sample, self.this_order)
        self.lower_order_nums = min(self.lower_order_nums + 1, c["solver_order"])
        self._step_index += 1
        return prev_sample
