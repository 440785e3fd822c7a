"""What every ported scheduler shares: config with diffusers' defaults, refusals, step index, noise.

Float arithmetic follows diffusers': a schedule diffusers keeps in float32 torch tensors
is a float32 numpy array here, and its 0-d values are ``np.float32`` scalars, which numpy
keeps in float32 when mixed with Python numbers (as torch does with 0-d tensors).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from mobius.errors import ConfigError

F32 = np.float32

#: The most training timesteps a scheduler config may name (diffusers' schedules use 1000).
MAX_TRAIN_TIMESTEPS = 1 << 20


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


#: The beta schedule's arguments (what :func:`betas` reads), as diffusers defaults them.
BETA_SCHEDULE_DEFAULTS: dict[str, Any] = dict(
    num_train_timesteps=1000,
    beta_start=0.0001,
    beta_end=0.02,
    beta_schedule="linear",
    trained_betas=None,
)


def betas(config: dict) -> np.ndarray:
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

        values = [min(1 - alpha_bar((i + 1) / n) / alpha_bar(i / n), 0.999) for i in range(n)]
        return np.asarray(values, dtype=F32)
    raise ConfigError(f"beta_schedule {schedule!r} is not ported")


#: The options that replace a scheduler's noise levels; a config may set one at most.
_SIGMA_SCHEDULES = ("use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas")


class SchedulerConfig(dict):
    """A scheduler's config, whose null in place of a number (or a list) fails where a
    scheduler reads it: a ``ConfigError`` naming the key, not a ``TypeError`` from the
    arithmetic or a schedule of NaNs. A null the scheduler never reads stays harmless, as
    in diffusers (``flow_shift`` without flow sigmas); ``get`` returns it as it is."""

    def __init__(self, owner: str, defaults: dict[str, Any], values: dict[str, Any]) -> None:
        super().__init__(values)
        self._owner, self._defaults = owner, defaults

    def __getitem__(self, key: str) -> Any:
        value = super().__getitem__(key)
        default = self._defaults.get(key)
        numeric = isinstance(default, (int, float, list, tuple)) and not isinstance(default, bool)
        if value is None and numeric:
            kind = "a list" if isinstance(default, (list, tuple)) else "a number"
            raise ConfigError(
                f"{self._owner} {key}=null in the scheduler config: it needs {kind} "
                "(leave the key out for diffusers' default)"
            )
        return value


class Scheduler:
    """The base of every port: config, refusals, diffusers' step-index rule, seeded noise.

    A sampler that adds noise (Euler ancestral, LCM, SDE DPM-Solver++, stochastic flow
    matching) draws it as ``generator.standard_normal(shape, dtype=float32)`` from
    ``self.generator``, a :class:`numpy.random.Generator` the runner sets (or passes to
    :func:`~mobius_diffusion.schedulers.load_scheduler`); ``step(..., variance_noise=x)``
    uses ``x`` instead, which is how the tests feed diffusers and mobius the same noise.
    """

    #: The constructor arguments of the diffusers class and their defaults.
    defaults: ClassVar[dict[str, Any]] = {}
    #: Arguments mobius ports only at these values: name -> allowed values.
    supported: ClassVar[dict[str, tuple]] = {}
    #: Values diffusers replaces on construction (shared configs): name -> {old: new}.
    remapped: ClassVar[dict[str, dict]] = {}
    order = 1

    def __init__(self, **config: Any) -> None:
        given = {k: v for k, v in config.items() if k in self.defaults}
        self.config = SchedulerConfig(
            type(self).__name__, self.defaults, {**self.defaults, **given}
        )
        self._check_types()
        for key, table in self.remapped.items():
            self.config[key] = table.get(self.config[key], self.config[key])
        for key, allowed in self.supported.items():
            if self.config[key] not in allowed:
                self.refuse(f"{key}={self.config[key]!r}", allowed)
        self.timesteps = np.zeros(0, dtype=F32)
        self.num_inference_steps: int | None = None
        self._step_index: int | None = None
        self._begin_index: int | None = None
        self.generator: np.random.Generator | None = None

    def _check_types(self) -> None:
        """A config is a stranger's file: each value must have its default's type (null aside)."""
        name = type(self).__name__
        for key, default in self.defaults.items():
            value = self.config.get(key)  # a null is refused where it is read, if it is
            if value is None or default is None:
                continue
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if isinstance(default, bool):
                ok, kind = isinstance(value, bool), "true or false"
            elif isinstance(default, int):
                ok, kind = number and isinstance(value, int), "a whole number"
            elif isinstance(default, float):
                ok, kind = number, "a number"
            elif isinstance(default, str):
                ok, kind = isinstance(value, str), "a string"
            else:  # a sequence (disable_corrector)
                ok, kind = isinstance(value, (list, tuple)), "a list"
            if not ok:
                raise ConfigError(
                    f"{name} {key}={value!r} in the scheduler config: expected {kind}"
                )
        chosen = [k for k in _SIGMA_SCHEDULES if self.config.get(k)]
        if len(chosen) > 1:
            raise ConfigError(f"{name} sets {' and '.join(chosen)}: one at most (as diffusers)")
        n = self.config.get("num_train_timesteps")
        sized = n is not None or self.defaults.get("num_train_timesteps") is not None
        if sized and not (n is not None and 2 <= n <= MAX_TRAIN_TIMESTEPS):
            # the schedule holds n entries: a package's 10**12 would allocate terabytes
            raise ConfigError(
                f"{name} num_train_timesteps={'null' if n is None else repr(n)} in the "
                f"scheduler config: must be from 2 "
                f"to {MAX_TRAIN_TIMESTEPS}"
            )

    def refuse(self, what: str, allowed: tuple | None = None) -> None:
        """Raise the ConfigError that names an option (or combination) mobius has not ported."""
        runs = f" (it runs {', '.join(repr(a) for a in allowed)})" if allowed else ""
        raise ConfigError(
            f"{type(self).__name__} {what} is not ported to mobius's numpy runner{runs}"
        )

    @classmethod
    def from_config(cls, config: dict) -> Scheduler:
        """The scheduler of a ``scheduler_config.json`` dict (its own keys only; others ignored)."""
        return cls(**config)

    @property
    def step_index(self) -> int | None:
        """The index of the next step in ``timesteps`` (None before the first call)."""
        return self._step_index

    def set_begin_index(self, begin_index: int) -> None:
        """Start at ``timesteps[begin_index]`` (image-to-image runs the steps ``strength`` keeps)."""
        self._begin_index = begin_index

    def index_for_timestep(self, timestep) -> int:
        """diffusers' rule: the first match of the timestep, the second if it repeats."""
        indices = np.nonzero(self.timesteps == timestep)[0]
        if len(indices) == 0:
            raise ValueError(f"timestep {timestep} is not in the schedule {self.timesteps}")
        return int(indices[1 if len(indices) > 1 else 0])

    def _init_step_index(self, timestep) -> None:
        """The begin index when one is set, else :meth:`index_for_timestep`."""
        if self._begin_index is not None:
            self._step_index = self._begin_index
        else:
            self._step_index = self.index_for_timestep(timestep)

    def noise_level_index(self, timestep) -> int:
        """Which noise level ``add_noise`` takes at ``timestep``, as diffusers picks it: the
        current step once stepping began (inpainting re-noises the original each step), else
        the begin index (image-to-image's first latents), else the timestep's own index."""
        if self._begin_index is None:
            return self.index_for_timestep(timestep)
        return self._begin_index if self._step_index is None else self._step_index

    def noise(
        self,
        shape: tuple[int, ...],
        variance_noise: np.ndarray | None = None,
        generator: np.random.Generator | None = None,
    ) -> np.ndarray:
        """Standard normal float32 noise: ``variance_noise`` if given, else drawn from the generator.

        The generator is ``generator`` or ``self.generator``; with neither, a fresh unseeded one
        (as diffusers draws from torch's global generator).
        """
        if variance_noise is not None:
            return np.asarray(variance_noise, dtype=F32).reshape(shape)
        if generator is None:
            if self.generator is None:
                self.generator = np.random.default_rng()
            generator = self.generator
        return generator.standard_normal(shape, dtype=F32)

    def scale_model_input(self, sample: np.ndarray, timestep) -> np.ndarray:
        """The model's input at ``timestep`` (the sample itself unless the family scales it)."""
        return sample


class DDPMFamily(Scheduler):
    """Schedulers over a discrete beta schedule: ``alphas_cumprod`` in float32."""

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        alphas = (F32(1.0) - betas(self.config)).astype(F32)
        # torch's cumprod accumulates float32 in float64, rounding each product once.
        self.alphas_cumprod = np.cumprod(alphas.astype(np.float64)).astype(F32)

    def train_sigmas(self) -> np.ndarray:
        """``((1 - alphas_cumprod) / alphas_cumprod) ** 0.5`` float32, ascending in t."""
        return (((1 - self.alphas_cumprod) / self.alphas_cumprod) ** 0.5).astype(F32)


class PreviousAlphaFamily(DDPMFamily):
    """DDIM, PNDM and LCM: a step goes from ``alphas_cumprod`` at one timestep to that at the
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

    def add_noise(self, original: np.ndarray, noise: np.ndarray, timestep) -> np.ndarray:
        """``original`` noised to integer ``timestep``: ``sqrt(a) x + sqrt(1 - a) noise`` (DDPM)."""
        alpha = self.alphas_cumprod[int(timestep)]
        return (alpha**0.5 * original + (1 - alpha) ** 0.5 * noise).astype(F32)
