"""The numpy DDPM and unCLIP schedulers against diffusers', step by step on the same outputs and noise.

diffusers draws each step's noise with its module's ``randn_tensor``; the test patches it
to return the draw mobius gets through ``variance_noise``.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius_diffusion.schedulers import load_scheduler

#: name -> (class, config, steps, channels of the model output over the sample's)
CASES = {
    # Kandinsky 2.2's decoder (scheduler/scheduler_config.json as the hub holds it)
    "ddpm-kandinsky": (
        "DDPMScheduler",
        dict(
            beta_start=0.00085,
            beta_end=0.012,
            clip_sample=False,
            steps_offset=1,
            timestep_spacing="leading",
        ),
        4,
        1,
    ),
    "ddpm-small-log-v": (
        "DDPMScheduler",
        dict(variance_type="fixed_small_log", prediction_type="v_prediction", clip_sample=True),
        3,
        1,
    ),
    "ddpm-large-sample-trailing": (
        "DDPMScheduler",
        dict(
            variance_type="fixed_large",
            prediction_type="sample",
            beta_schedule="scaled_linear",
            timestep_spacing="trailing",
        ),
        3,
        1,
    ),
    "ddpm-learned-range-linspace": (
        "DDPMScheduler",
        dict(
            variance_type="learned_range",
            beta_schedule="squaredcos_cap_v2",
            timestep_spacing="linspace",
        ),
        3,
        2,
    ),
    # Kandinsky 2.2's prior (prior_scheduler: x0 prediction, clipped to 10)
    "unclip-kandinsky": (
        "UnCLIPScheduler",
        dict(prediction_type="sample", clip_sample_range=10.0),
        5,
        1,
    ),
    "unclip-epsilon": ("UnCLIPScheduler", dict(num_train_timesteps=100), 3, 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_scheduler_matches_diffusers(case, monkeypatch):
    import diffusers
    import torch

    name, config, steps, widen = CASES[case]
    reference = getattr(diffusers, name)(**config)
    ours = load_scheduler({"_class_name": name, **config})
    reference.set_timesteps(steps)
    ours.set_timesteps(steps)
    np.testing.assert_array_equal(ours.timesteps, reference.timesteps.numpy())
    assert ours.init_noise_sigma == reference.init_noise_sigma

    module = sys.modules[type(reference).__module__]
    rng = np.random.default_rng(0)
    sample = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    expected = torch.from_numpy(sample.copy())
    timesteps = list(ours.timesteps)
    for i, t in enumerate(timesteps):
        output = rng.standard_normal((2, 3 * widen, 4, 4)).astype(np.float32)
        if widen == 2:  # a learned variance in [-1, 1]
            output[:, 3:] = np.tanh(output[:, 3:])
        noise = rng.standard_normal(sample.shape).astype(np.float32)
        monkeypatch.setattr(module, "randn_tensor", lambda *a, n=noise, **k: torch.from_numpy(n))
        if name == "UnCLIPScheduler":  # the prior pipelines pass the next timestep
            prev = None if i + 1 == len(timesteps) else timesteps[i + 1]
            sample = ours.step(output, t, sample, prev_timestep=prev, variance_noise=noise)
            expected = reference.step(
                torch.from_numpy(output), int(t), expected, prev_timestep=prev
            ).prev_sample
        else:
            sample = ours.step(output, t, sample, variance_noise=noise)
            expected = reference.step(torch.from_numpy(output), int(t), expected).prev_sample
        assert sample.dtype == np.float32
        diff = float(np.abs(sample - expected.numpy()).max())
        # float32 rounding apart (a few ulps per step), the same numbers
        assert diff <= 1e-5 * max(1.0, float(expected.abs().max())), (case, i, diff)


def test_seeded_generator_draws_the_noise():
    """With no ``variance_noise``, a step draws from the generator the runner seeds."""
    rng = np.random.default_rng(0)
    sample = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    output = rng.standard_normal(sample.shape).astype(np.float32)
    seeded = load_scheduler({"_class_name": "DDPMScheduler"}, generator=np.random.default_rng(7))
    fed = load_scheduler({"_class_name": "DDPMScheduler"})
    for scheduler in (seeded, fed):
        scheduler.set_timesteps(2)
    t = seeded.timesteps[0]
    draw = np.random.default_rng(7).standard_normal(sample.shape, dtype=np.float32)
    np.testing.assert_array_equal(
        seeded.step(output, t, sample), fed.step(output, t, sample, variance_noise=draw)
    )


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"_class_name": "DDPMScheduler", "variance_type": "learned"}, "variance_type='learned'"),
        ({"_class_name": "DDPMScheduler", "thresholding": True}, "thresholding=True"),
        ({"_class_name": "UnCLIPScheduler", "variance_type": "learned_range"}, "learned_range"),
        ({"_class_name": "UnCLIPScheduler", "beta_schedule": "linear"}, "beta_schedule='linear'"),
        ({"_class_name": "UnCLIPScheduler", "clip_sample_range": "10"}, "expected a number"),
    ],
)
def test_unported_options_are_refused(config, named):
    with pytest.raises(ConfigError, match=named):
        load_scheduler(config)
