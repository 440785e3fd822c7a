"""diffusers' noise schedulers ported to numpy: what a built pipeline needs to run without torch.

Each class follows its diffusers namesake step by step, in float32 where diffusers
computes in float32, so the same model outputs give the same samples (checked against
diffusers in ``tests/test_schedulers*.py``). A scheduler is made from the package's
``scheduler/scheduler_config.json`` by :func:`load_scheduler`; keys a class does not
take are ignored, as diffusers ignores them (configs are shared between compatible
schedulers), and options a class takes but mobius has not ported raise
:class:`mobius.errors.ConfigError`, as does a scheduler class that is not ported.

Interface (as diffusers'): ``set_timesteps(n, ...)`` fills ``timesteps``;
``init_noise_sigma`` scales the initial noise; per entry of ``timesteps``,
``scale_model_input(sample, t)``, the model, then ``step(model_output, t, sample)``
returns the next sample (Heun's ``timesteps`` repeat: two calls per noise level).

Noise: the samplers that add noise at each step (Euler ancestral, LCM,
``sde-dpmsolver++``, stochastic flow matching) draw it from ``scheduler.generator``, a
:class:`numpy.random.Generator`. A runner seeds it once per generation::

    rng = np.random.default_rng(seed)
    latents = rng.standard_normal(shape).astype(np.float32)
    scheduler = load_scheduler(config, generator=rng)  # or: scheduler.generator = rng

``step(..., variance_noise=x)`` (and ``generator=``) override it for one step.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mobius.errors import ConfigError
from mobius_diffusion.schedulers.base import Scheduler, torch_linspace
from mobius_diffusion.schedulers.cogvideox import CogVideoXDDIMScheduler, CogVideoXDPMScheduler
from mobius_diffusion.schedulers.ddim import DDIMScheduler, LCMScheduler
from mobius_diffusion.schedulers.ddpm import DDPMScheduler, UnCLIPScheduler
from mobius_diffusion.schedulers.dpm_solver import DPMSolverMultistepScheduler
from mobius_diffusion.schedulers.edm import EDMDPMSolverMultistepScheduler, EDMEulerScheduler
from mobius_diffusion.schedulers.euler import (
    EulerAncestralDiscreteScheduler,
    EulerDiscreteScheduler,
    HeunDiscreteScheduler,
)
from mobius_diffusion.schedulers.flow_match import FlowMatchEulerDiscreteScheduler
from mobius_diffusion.schedulers.pndm import PNDMScheduler
from mobius_diffusion.schedulers.unipc import UniPCMultistepScheduler
from mobius_diffusion.schedulers.wuerstchen import DDPMWuerstchenScheduler

__all__ = [
    "SCHEDULERS",
    "CogVideoXDDIMScheduler",
    "CogVideoXDPMScheduler",
    "DDIMScheduler",
    "DDPMScheduler",
    "DDPMWuerstchenScheduler",
    "DPMSolverMultistepScheduler",
    "EDMDPMSolverMultistepScheduler",
    "EDMEulerScheduler",
    "EulerAncestralDiscreteScheduler",
    "EulerDiscreteScheduler",
    "FlowMatchEulerDiscreteScheduler",
    "HeunDiscreteScheduler",
    "LCMScheduler",
    "PNDMScheduler",
    "Scheduler",
    "UnCLIPScheduler",
    "UniPCMultistepScheduler",
    "load_scheduler",
    "torch_linspace",
]

#: The ported schedulers, by diffusers class name.
SCHEDULERS: dict[str, type[Scheduler]] = {
    cls.__name__: cls
    for cls in (
        EulerDiscreteScheduler,
        EulerAncestralDiscreteScheduler,
        HeunDiscreteScheduler,
        DDIMScheduler,
        DDPMScheduler,
        UnCLIPScheduler,
        PNDMScheduler,
        LCMScheduler,
        DPMSolverMultistepScheduler,
        UniPCMultistepScheduler,
        FlowMatchEulerDiscreteScheduler,
        EDMEulerScheduler,
        EDMDPMSolverMultistepScheduler,
        CogVideoXDDIMScheduler,
        CogVideoXDPMScheduler,
        DDPMWuerstchenScheduler,
    )
}


def load_scheduler(
    source: str | Path | dict, generator: np.random.Generator | None = None
) -> Scheduler:
    """The ported scheduler a ``scheduler_config.json`` (a path, its folder, or the dict) names.

    ``generator`` seeds the noise of the samplers that draw some at each step.

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
    if not isinstance(source, dict):
        raise ConfigError("a scheduler config must be a JSON object")
    name = source.get("_class_name")
    if name not in SCHEDULERS:
        raise ConfigError(
            f"scheduler {name!r} is not ported to mobius's numpy runner; it runs "
            f"{', '.join(sorted(SCHEDULERS))} (edit scheduler/scheduler_config.json to use one)"
        )
    scheduler = SCHEDULERS[name].from_config(source)
    scheduler.generator = generator
    return scheduler
