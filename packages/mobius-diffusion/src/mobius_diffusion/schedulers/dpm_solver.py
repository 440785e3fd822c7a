"""DPM-Solver++ multistep over a DDPM schedule or flow-matching sigmas (SD, SDXL, Sana)."""

from __future__ import annotations

from typing import Any

import numpy as np

from mobius_diffusion.schedulers import sigmas as schedules
from mobius_diffusion.schedulers.base import BETA_SCHEDULE_DEFAULTS, F32, DDPMFamily
from mobius_diffusion.schedulers.multistep import (
    DPMSolverPlusPlus,
    VPOrFlowSigmas,
    lambda_of,
    multistep_timesteps,
)

_SPACINGS = ("linspace", "leading", "trailing")


class DPMSolverMultistepScheduler(VPOrFlowSigmas, DPMSolverPlusPlus, DDPMFamily):
    """``algorithm_type`` dpmsolver++ or sde-dpmsolver++ (the deprecated dpmsolver and
    sde-dpmsolver are refused), orders 1–3; Karras, exponential or flow sigmas."""

    defaults = dict(
        BETA_SCHEDULE_DEFAULTS,
        solver_order=2,
        prediction_type="epsilon",
        thresholding=False,
        dynamic_thresholding_ratio=0.995,
        sample_max_value=1.0,
        algorithm_type="dpmsolver++",
        solver_type="midpoint",
        lower_order_final=True,
        euler_at_final=False,
        use_karras_sigmas=False,
        use_exponential_sigmas=False,
        use_beta_sigmas=False,
        use_lu_lambdas=False,
        use_flow_sigmas=False,
        flow_shift=1.0,
        final_sigmas_type="zero",
        lambda_min_clipped=-float("inf"),
        variance_type=None,
        timestep_spacing="linspace",
        steps_offset=0,
        rescale_betas_zero_snr=False,
        use_dynamic_shifting=False,
        time_shift_type="exponential",
    )
    # diffusers maps the options of the schedulers that share these configs
    remapped = dict(
        algorithm_type={"deis": "dpmsolver++"},
        solver_type={"logrho": "midpoint", "bh1": "midpoint", "bh2": "midpoint"},
    )
    supported = dict(
        solver_order=(1, 2, 3),
        prediction_type=("epsilon", "sample", "v_prediction", "flow_prediction"),
        thresholding=(False,),
        algorithm_type=("dpmsolver++", "sde-dpmsolver++"),
        solver_type=("midpoint", "heun"),
        use_beta_sigmas=(False, None),
        use_lu_lambdas=(False, None),
        final_sigmas_type=("zero", "sigma_min"),
        variance_type=(None, "learned", "learned_range"),
        timestep_spacing=_SPACINGS,
        rescale_betas_zero_snr=(False,),
        time_shift_type=("exponential",),
    )
    init_noise_sigma = 1.0

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        if config.get("algorithm_type") == "deis" and self.config["final_sigmas_type"] == "zero":
            raise ValueError(
                "algorithm_type 'deis' takes final_sigmas_type 'sigma_min' (as diffusers)"
            )
        ac = self.alphas_cumprod
        self.lambda_t = lambda_of(np.sqrt(ac), np.sqrt(F32(1) - ac))
        self.reset_history()

    def set_timesteps(self, num_inference_steps: int, mu: float | None = None) -> None:
        """``num_inference_steps`` timesteps and sigmas (``mu``: the dynamic flow shift ``exp(mu)``)."""
        c, n = self.config, self.config["num_train_timesteps"]
        if mu is not None:
            if not c["use_dynamic_shifting"]:
                raise ValueError("mu is only taken with use_dynamic_shifting")
            c["flow_shift"] = np.exp(mu)  # diffusers keeps it in the config too
        clipped = int(np.searchsorted(self.lambda_t[::-1], c["lambda_min_clipped"]))
        timesteps = multistep_timesteps(c, num_inference_steps, n - clipped)
        sigmas = self.train_sigmas()
        log_sigmas = np.log(sigmas)
        if c["use_karras_sigmas"] or c["use_exponential_sigmas"]:
            convert = (
                schedules.karras_sigmas if c["use_karras_sigmas"] else schedules.exponential_sigmas
            )
            sigmas = convert(np.flip(sigmas).copy(), num_inference_steps, c)
            timesteps = schedules.sigmas_to_t(sigmas, log_sigmas)
            if c["use_karras_sigmas"] and c["beta_schedule"] != "squaredcos_cap_v2":
                timesteps = timesteps.round()
        elif c["use_flow_sigmas"]:
            alphas = np.linspace(1, 1 / n, num_inference_steps + 1)
            sigmas = np.flip(schedules.shift(c["flow_shift"], 1.0 - alphas))[:-1].copy()
            timesteps = (sigmas * n).copy()
        else:
            sigmas = np.interp(timesteps, np.arange(0, len(sigmas)), sigmas)
        last = 0
        if c["final_sigmas_type"] == "sigma_min":
            last = ((1 - self.alphas_cumprod[0]) / self.alphas_cumprod[0]) ** 0.5
        self.sigmas = np.concatenate([sigmas, [last]]).astype(F32)
        self.timesteps = timesteps.astype(np.int64)
        self.num_inference_steps = len(timesteps)
        self.reset_history()

    def convert_model_output(self, model_output: np.ndarray, sample: np.ndarray) -> np.ndarray:
        """The x0 of an epsilon / sample / v / flow prediction at the current sigma."""
        learned = self.config["variance_type"] in ("learned", "learned_range")
        if learned and self.config["prediction_type"] == "epsilon":
            model_output = model_output[:, :3]  # the other channels are the learned variance
        return self.x0_prediction(model_output, sample)
