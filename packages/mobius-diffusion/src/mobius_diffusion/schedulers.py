"""diffusers' noise schedulers ported to numpy: what a built pipeline needs to run without torch.

Each class follows its diffusers namesake step by step, in float32 where diffusers
computes in float32, so the same model outputs give the same samples (checked against
diffusers in ``tests/test_schedulers.py``). A scheduler is made from the package's
``scheduler/scheduler_config.json`` by :func:`load_scheduler`; keys a class does not
take are ignored, as diffusers ignores them (configs are shared between compatible
schedulers), and options a class takes but mobius has not ported raise
:class:`mobius.errors.ConfigError`, as does a scheduler class that is not ported.

Interface (as diffusers'): ``set_timesteps(n, ...)`` fills ``timesteps``;
``init_noise_sigma`` scales the initial noise; per step ``scale_model_input(sample,
t)`` then ``step(model_output, t, sample)`` returns the previous sample.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from mobius.errors import ConfigError

F32 = np.float32


def torch_linspace(start: float, end: float, steps: int) -> np.ndarray:
    """``torch.linspace(start, end, steps)`` in float32, bit for bit as torch's CPU kernel makes it.

    The step is a float32; each value is one fused multiply-add from the nearer end.
    """
    start, end = F32(start), F32(end)
    step = np.float64((end - start) / F32(steps - 1)) if steps > 1 else 0.0
    i = np.arange(steps, dtype=np.float64)
    from_start = np.float64(start) + step * i
    from_end = np.float64(end) - step * (steps - 1 - i)
    return np.where(i < steps // 2, from_start, from_end).astype(F32)


#: The beta schedule's arguments (what :func:`_betas` reads), as diffusers defaults them.
_BETA_SCHEDULE_DEFAULTS: dict[str, Any] = dict(
    num_train_timesteps=1000,
    beta_start=0.0001,
    beta_end=0.02,
    beta_schedule="linear",
    trained_betas=None,
)


def _betas(config: dict) -> np.ndarray:
    """``betas`` [num_train_timesteps] float32 of a DDPM-family schedule."""
    n = config["num_train_timesteps"]
    if config.get("trained_betas") is not None:
        return np.asarray(config["trained_betas"], dtype=F32)
    schedule = config["beta_schedule"]
    start, end = config["beta_start"], config["beta_end"]
    if schedule == "linear":
        return torch_linspace(start, end, n)
    if schedule == "scaled_linear":  # torch squares the float32 values
        return torch_linspace(start**0.5, end**0.5, n) ** 2
    if schedule == "squaredcos_cap_v2":

        def alpha_bar(t: float) -> float:
            return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2

        betas = [min(1 - alpha_bar((i + 1) / n) / alpha_bar(i / n), 0.999) for i in range(n)]
        return np.asarray(betas, dtype=F32)
    raise ConfigError(f"beta_schedule {schedule!r} is not ported")


def _ddim_timesteps(config: dict, steps: int) -> np.ndarray:
    """DDIM's integer timesteps, descending."""
    n = config["num_train_timesteps"]
    spacing = config["timestep_spacing"]
    if spacing == "linspace":
        return np.linspace(0, n - 1, steps).round().astype(np.int64)[::-1].copy()
    if spacing == "leading":
        ratio = n // steps
        return (np.arange(0, steps) * ratio).round()[::-1].copy().astype(np.int64) + config[
            "steps_offset"
        ]
    if spacing == "trailing":
        ratio = n / steps
        return np.round(np.arange(n, 0, -ratio)).astype(np.int64) - 1
    raise ConfigError(f"timestep_spacing {spacing!r} is not ported")


class Scheduler:
    """What every ported scheduler shares: its config with diffusers' defaults, refusals, step index."""

    #: The constructor arguments of the diffusers class and their defaults.
    defaults: ClassVar[dict[str, Any]] = {}
    #: Arguments mobius ports only at these values: name -> allowed values.
    supported: ClassVar[dict[str, tuple]] = {}
    order = 1

    def __init__(self, **config: Any) -> None:
        self.config = {**self.defaults, **{k: v for k, v in config.items() if k in self.defaults}}
        name = type(self).__name__
        for key, allowed in self.supported.items():
            if self.config[key] not in allowed:
                raise ConfigError(
                    f"{name} {key}={self.config[key]!r} is not ported to mobius's numpy runner "
                    f"(it runs {', '.join(repr(a) for a in allowed)})"
                )
        self.timesteps = np.zeros(0, dtype=F32)
        self.num_inference_steps: int | None = None
        self._step_index: int | None = None

    @classmethod
    def from_config(cls, config: dict) -> Scheduler:
        """The scheduler of a ``scheduler_config.json`` dict (its own keys only; others ignored)."""
        return cls(**config)

    def _init_step_index(self, timestep) -> None:
        """diffusers' rule: the first match of the timestep, the second if it repeats."""
        indices = np.nonzero(self.timesteps == timestep)[0]
        if len(indices) == 0:
            raise ValueError(f"timestep {timestep} is not in the schedule {self.timesteps}")
        self._step_index = int(indices[1 if len(indices) > 1 else 0])

    def scale_model_input(self, sample: np.ndarray, timestep) -> np.ndarray:
        return sample


class _DDPMFamily(Scheduler):
    """Schedulers over a discrete beta schedule: ``alphas_cumprod`` in float32."""

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        alphas = (F32(1.0) - _betas(self.config)).astype(F32)
        # torch's cumprod accumulates float32 in float64, rounding each product once.
        self.alphas_cumprod = np.cumprod(alphas.astype(np.float64)).astype(F32)


class _PreviousAlphaFamily(_DDPMFamily):
    """DDIM and PNDM: a step goes from ``alphas_cumprod`` at one timestep to that at the
    previous; before timestep 0 comes ``final_alpha_cumprod`` (1 with ``set_alpha_to_one``)."""

    init_noise_sigma = F32(1.0)

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.final_alpha_cumprod = (
            F32(1.0) if self.config["set_alpha_to_one"] else self.alphas_cumprod[0]
        )

    def previous_alpha(self, prev: int) -> np.float32:
        """``alphas_cumprod[prev]``, or ``final_alpha_cumprod`` when ``prev`` is before 0."""
        return self.alphas_cumprod[prev] if prev >= 0 else self.final_alpha_cumprod


class EulerDiscreteScheduler(_DDPMFamily):
    """Euler's method over the Karras sigmas of a DDPM schedule (``s_churn`` 0: deterministic)."""

    defaults = dict(
        _BETA_SCHEDULE_DEFAULTS,
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
        use_karras_sigmas=(False, None),
        use_exponential_sigmas=(False, None),
        use_beta_sigmas=(False, None),
        timestep_spacing=("linspace", "leading", "trailing"),
        timestep_type=("discrete",),
        rescale_betas_zero_snr=(False,),
        final_sigmas_type=("zero", "sigma_min"),
    )

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self._train_sigmas = (((1 - self.alphas_cumprod) / self.alphas_cumprod) ** 0.5).astype(F32)
        self.sigmas = np.concatenate([self._train_sigmas[::-1], [0]]).astype(F32)

    @property
    def init_noise_sigma(self) -> np.float32:
        max_sigma = self.sigmas.max()
        if self.config["timestep_spacing"] in ("linspace", "trailing"):
            return max_sigma
        return (max_sigma**2 + 1) ** 0.5

    def set_timesteps(self, num_inference_steps: int) -> None:
        c, n = self.config, self.config["num_train_timesteps"]
        self.num_inference_steps = steps = num_inference_steps
        spacing = c["timestep_spacing"]
        if spacing == "linspace":
            timesteps = np.linspace(0, n - 1, steps, dtype=F32)[::-1].copy()
        elif spacing == "leading":
            ratio = n // steps
            timesteps = (np.arange(0, steps) * ratio).round()[::-1].copy().astype(F32)
            timesteps += c["steps_offset"]
        else:  # trailing
            ratio = n / steps
            timesteps = np.arange(n, 0, -ratio).round().copy().astype(F32) - 1
        sigmas = np.interp(timesteps, np.arange(0, n), self._train_sigmas)
        if c["final_sigmas_type"] == "sigma_min":
            last = ((1 - self.alphas_cumprod[0]) / self.alphas_cumprod[0]) ** 0.5
        else:
            last = 0
        self.sigmas = np.concatenate([sigmas, [last]]).astype(F32)
        self.timesteps = timesteps.astype(F32)
        self._step_index = None

    def scale_model_input(self, sample: np.ndarray, timestep) -> np.ndarray:
        if self._step_index is None:
            self._init_step_index(timestep)
        sigma = self.sigmas[self._step_index]
        return (sample / ((sigma**2 + 1) ** 0.5)).astype(sample.dtype)

    def step(self, model_output: np.ndarray, timestep, sample: np.ndarray) -> np.ndarray:
        if self._step_index is None:
            self._init_step_index(timestep)
        sample = sample.astype(F32)
        sigma = self.sigmas[self._step_index]
        sigma_hat = sigma * F32(1.0)  # s_churn 0: gamma 0
        kind = self.config["prediction_type"]
        if kind in ("original_sample", "sample"):
            pred_original = model_output
        elif kind == "epsilon":
            pred_original = sample - sigma_hat * model_output
        else:  # v_prediction
            pred_original = model_output * (-sigma / (sigma**2 + 1) ** 0.5) + (
                sample / (sigma**2 + 1)
            )
        derivative = (sample - pred_original) / sigma_hat
        dt = self.sigmas[self._step_index + 1] - sigma_hat
        self._step_index += 1
        return (sample + derivative * dt).astype(model_output.dtype)


class DDIMScheduler(_PreviousAlphaFamily):
    """DDIM with ``eta`` 0 (deterministic), as the pipelines call it by default."""

    defaults = dict(
        _BETA_SCHEDULE_DEFAULTS,
        clip_sample=True,
        set_alpha_to_one=True,
        steps_offset=0,
        prediction_type="epsilon",
        thresholding=False,
        dynamic_thresholding_ratio=0.995,
        clip_sample_range=1.0,
        sample_max_value=1.0,
        timestep_spacing="leading",
        rescale_betas_zero_snr=False,
    )
    supported = dict(
        prediction_type=("epsilon", "sample", "v_prediction"),
        thresholding=(False,),
        timestep_spacing=("linspace", "leading", "trailing"),
        rescale_betas_zero_snr=(False,),
    )

    def set_timesteps(self, num_inference_steps: int) -> None:
        if num_inference_steps > self.config["num_train_timesteps"]:
            raise ValueError("num_inference_steps cannot exceed num_train_timesteps")
        self.num_inference_steps = num_inference_steps
        self.timesteps = _ddim_timesteps(self.config, num_inference_steps)

    def step(self, model_output: np.ndarray, timestep, sample: np.ndarray) -> np.ndarray:
        c = self.config
        timestep = int(timestep)
        prev = timestep - c["num_train_timesteps"] // self.num_inference_steps
        alpha_t, alpha_prev = self.alphas_cumprod[timestep], self.previous_alpha(prev)
        beta_t = 1 - alpha_t
        if c["prediction_type"] == "epsilon":
            pred_original = (sample - beta_t**0.5 * model_output) / alpha_t**0.5
            pred_epsilon = model_output
        elif c["prediction_type"] == "sample":
            pred_original = model_output
            pred_epsilon = (sample - alpha_t**0.5 * pred_original) / beta_t**0.5
        else:  # v_prediction
            pred_original = (alpha_t**0.5) * sample - (beta_t**0.5) * model_output
            pred_epsilon = (alpha_t**0.5) * model_output + (beta_t**0.5) * sample
        if c["clip_sample"]:
            limit = c["clip_sample_range"]
            pred_original = np.clip(pred_original, -limit, limit).astype(pred_original.dtype)
        std_dev_t = F32(0.0)  # eta 0
        direction = (1 - alpha_prev - std_dev_t**2) ** 0.5 * pred_epsilon
        return alpha_prev**0.5 * pred_original + direction


class PNDMScheduler(_PreviousAlphaFamily):
    """PNDM: Runge–Kutta warm-up steps (unless ``skip_prk_steps``), then linear multistep."""

    defaults = dict(
        _BETA_SCHEDULE_DEFAULTS,
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


class FlowMatchEulerDiscreteScheduler(Scheduler):
    """Euler steps of a flow-matching ODE over shifted sigmas (Flux, SD3)."""

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
        invert_sigmas=(False,),
        use_karras_sigmas=(False, None),
        use_exponential_sigmas=(False, None),
        use_beta_sigmas=(False, None),
        time_shift_type=("exponential", "linear"),
        stochastic_sampling=(False,),
    )
    init_noise_sigma = 1.0

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        n = self.config["num_train_timesteps"]
        timesteps = np.linspace(1, n, n, dtype=F32)[::-1].copy()
        sigmas = timesteps / F32(n)
        self.shift = self.config["shift"]
        if not self.config["use_dynamic_shifting"]:
            sigmas = (self.shift * sigmas / (1 + (self.shift - 1) * sigmas)).astype(F32)
        self.timesteps = (sigmas * F32(n)).astype(F32)
        self.sigmas = sigmas
        self.sigma_min, self.sigma_max = float(sigmas[-1]), float(sigmas[0])

    def time_shift(self, mu: float, sigma: float, t: np.ndarray) -> np.ndarray:
        if self.config["time_shift_type"] == "exponential":
            return math.exp(mu) / (math.exp(mu) + (1 / t - 1) ** sigma)
        return mu / (mu + (1 / t - 1) ** sigma)

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
        self.num_inference_steps = len(sigmas)
        if c["use_dynamic_shifting"]:
            sigmas = self.time_shift(mu, 1.0, sigmas)
        else:
            sigmas = self.shift * sigmas / (1 + (self.shift - 1) * sigmas)
        if c["shift_terminal"]:
            one_minus = 1 - sigmas
            scale = one_minus[-1] / (1 - c["shift_terminal"])
            sigmas = 1 - (one_minus / scale)
        sigmas = np.asarray(sigmas).astype(F32)
        self.timesteps = (sigmas * F32(n)).astype(F32)
        self.sigmas = np.concatenate([sigmas, np.zeros(1, dtype=F32)])
        self._step_index = None

    def step(self, model_output: np.ndarray, timestep, sample: np.ndarray) -> np.ndarray:
        if self._step_index is None:
            self._init_step_index(timestep)
        sample = sample.astype(F32)
        dt = self.sigmas[self._step_index + 1] - self.sigmas[self._step_index]
        self._step_index += 1
        return (sample + dt * model_output).astype(model_output.dtype)


#: The ported schedulers, by diffusers class name.
SCHEDULERS: dict[str, type[Scheduler]] = {
    cls.__name__: cls
    for cls in (
        EulerDiscreteScheduler,
        DDIMScheduler,
        PNDMScheduler,
        FlowMatchEulerDiscreteScheduler,
    )
}


def load_scheduler(source: str | Path | dict) -> Scheduler:
    """The ported scheduler a ``scheduler_config.json`` (a path, its folder, or the dict) names.

    Raises:
        ConfigError: the class (``_class_name``) is not ported, or an option of it is not.
    """
    if not isinstance(source, dict):
        path = Path(source)
        path = path / "scheduler_config.json" if path.is_dir() else path
        try:
            source = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"unreadable scheduler config {path}: {exc}") from None
    name = source.get("_class_name")
    if name not in SCHEDULERS:
        raise ConfigError(
            f"scheduler {name!r} is not ported to mobius's numpy runner; it runs "
            f"{', '.join(sorted(SCHEDULERS))} (edit scheduler/scheduler_config.json to use one)"
        )
    return SCHEDULERS[name].from_config(source)
