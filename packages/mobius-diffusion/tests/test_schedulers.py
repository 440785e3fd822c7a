"""The numpy schedulers against diffusers' own, step by step on the same model outputs."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius_diffusion.schedulers import SCHEDULERS, load_scheduler

SD = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear")

CASES = {
    "euler-sd": ("EulerDiscreteScheduler", dict(SD, steps_offset=1), 4),
    "euler-leading-v": (
        "EulerDiscreteScheduler",
        dict(SD, timestep_spacing="leading", steps_offset=1, prediction_type="v_prediction"),
        3,
    ),
    "euler-trailing-sigma-min": (
        "EulerDiscreteScheduler",
        dict(timestep_spacing="trailing", final_sigmas_type="sigma_min"),
        5,
    ),
    "euler-karras-sdxl": (
        "EulerDiscreteScheduler",
        dict(SD, timestep_spacing="leading", use_karras_sigmas=True),
        4,
    ),
    "euler-exponential-bounds": (
        "EulerDiscreteScheduler",
        dict(use_exponential_sigmas=True, sigma_min=0.05, sigma_max=20.0),
        4,
    ),
    # Stable Video Diffusion's (stabilityai/stable-video-diffusion-img2vid-xt): Karras sigmas
    # between its bounds, v-prediction with continuous timesteps log(sigma) / 4
    "euler-svd": (
        "EulerDiscreteScheduler",
        dict(
            SD,
            timestep_spacing="leading",
            steps_offset=1,
            use_karras_sigmas=True,
            sigma_min=0.002,
            sigma_max=700.0,
            prediction_type="v_prediction",
            timestep_type="continuous",
        ),
        4,
    ),
    "ddim-sd": (
        "DDIMScheduler",
        dict(SD, clip_sample=False, set_alpha_to_one=False, steps_offset=1),
        4,
    ),
    "ddim-clip-cosine-v": (
        "DDIMScheduler",
        dict(beta_schedule="squaredcos_cap_v2", prediction_type="v_prediction"),
        3,
    ),
    "ddim-trailing-sample": (
        "DDIMScheduler",
        dict(timestep_spacing="trailing", prediction_type="sample", clip_sample_range=0.5),
        3,
    ),
    "pndm-sd": (
        "PNDMScheduler",
        dict(SD, skip_prk_steps=True, set_alpha_to_one=False, steps_offset=1),
        6,
    ),
    "pndm-prk": ("PNDMScheduler", dict(SD, steps_offset=1), 5),
    "pndm-linspace-v": (
        "PNDMScheduler",
        dict(skip_prk_steps=True, timestep_spacing="linspace", prediction_type="v_prediction"),
        4,
    ),
    "flow-match-flux": (
        "FlowMatchEulerDiscreteScheduler",
        dict(shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15),
        4,
    ),
    "flow-match-shift": ("FlowMatchEulerDiscreteScheduler", dict(shift=3.0), 5),
    "flow-match-linear-terminal": (
        "FlowMatchEulerDiscreteScheduler",
        dict(use_dynamic_shifting=True, time_shift_type="linear", shift_terminal=0.1),
        3,
    ),
}


def _set_timesteps(scheduler, name: str, steps: int) -> None:
    if name != "FlowMatchEulerDiscreteScheduler":
        scheduler.set_timesteps(steps)
        return
    sigmas = np.linspace(1.0, 1 / steps, steps)  # as FluxPipeline passes them
    mu = 0.8 if scheduler.config["use_dynamic_shifting"] else None
    scheduler.set_timesteps(sigmas=sigmas, mu=mu)


@pytest.mark.parametrize("case", sorted(CASES))
def test_scheduler_matches_diffusers(case):
    import diffusers
    import torch

    name, config, steps = CASES[case]
    reference = getattr(diffusers, name)(**config)
    ours = load_scheduler({"_class_name": name, "_diffusers_version": "0.42", **config})
    _set_timesteps(reference, name, steps)
    _set_timesteps(ours, name, steps)
    np.testing.assert_array_equal(ours.timesteps, reference.timesteps.numpy())
    # (flow matching starts from unit noise: diffusers' class has no init_noise_sigma)
    assert np.float32(ours.init_noise_sigma) == np.float32(
        getattr(reference, "init_noise_sigma", 1.0)
    )

    rng = np.random.default_rng(0)
    sample = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
    sample = (sample * np.float32(ours.init_noise_sigma)).astype(np.float32)
    expected = torch.from_numpy(sample.copy())
    worst = 0.0
    for t_ours, t_ref in zip(ours.timesteps, reference.timesteps, strict=True):
        scaled = ours.scale_model_input(sample, t_ours)
        scale_input = getattr(reference, "scale_model_input", lambda x, t: x)
        scaled_ref = scale_input(expected, t_ref)
        # float32 rounding apart (a few ulps per step), the same numbers
        bound = 1e-5 * max(1.0, float(scaled_ref.abs().max()))
        np.testing.assert_allclose(scaled, scaled_ref.numpy(), rtol=0, atol=bound)
        output = rng.standard_normal(sample.shape).astype(np.float32)
        sample = ours.step(output, t_ours, sample)
        expected = reference.step(torch.from_numpy(output), t_ref, expected).prev_sample
        assert sample.dtype == np.float32
        diff = float(np.abs(sample - expected.numpy()).max())
        worst = max(worst, diff)
        assert diff <= 1e-5 * max(1.0, float(expected.abs().max())), (case, diff)
    print(case, "max abs diff", worst)


def test_unported_scheduler_is_refused():
    with pytest.raises(ConfigError, match="'LMSDiscreteScheduler' is not ported"):
        load_scheduler({"_class_name": "LMSDiscreteScheduler"})


def test_unported_option_is_refused():
    with pytest.raises(ConfigError, match="interpolation_type='log_linear'"):
        load_scheduler(
            {"_class_name": "EulerDiscreteScheduler", "interpolation_type": "log_linear"}
        )


def test_foreign_keys_are_ignored_as_diffusers_does():
    # Stable Diffusion 1.5's PNDM config carries DDIM's clip_sample.
    scheduler = load_scheduler({"_class_name": "PNDMScheduler", "clip_sample": False})
    assert "clip_sample" not in scheduler.config
    assert set(SCHEDULERS) >= {"EulerDiscreteScheduler", "FlowMatchEulerDiscreteScheduler"}


def _null_number_cases():
    """Every scheduler and each of its keys whose diffusers default is a number or a list."""
    for name, cls in SCHEDULERS.items():
        for key, default in cls.defaults.items():
            if isinstance(default, (int, float, list, tuple)) and not isinstance(default, bool):
                yield pytest.param(cls, key, id=f"{name}-{key}")


@pytest.mark.parametrize(("cls", "key"), list(_null_number_cases()))
def test_a_null_number_is_refused_where_it_is_read(cls, key):
    """A package's scheduler config with ``null`` in place of a number (or a list): the
    scheduler either never reads it (as diffusers, which passes it on) or refuses it by
    name; it never fails with a TypeError or computes NaN (28 keys crashed before)."""
    sample = np.ones((1, 4, 2, 2), np.float32)
    try:
        scheduler = cls.from_config({key: None})
        scheduler.generator = np.random.default_rng(0)  # the samplers that add noise
        scheduler.set_timesteps(4)
        for t in scheduler.timesteps[:2]:
            sample = scheduler.scale_model_input(sample, t)
            out = scheduler.step(np.full_like(sample, 0.5), t, sample)
            sample = out[0] if isinstance(out, tuple) else getattr(out, "prev_sample", out)
    except ConfigError as error:
        assert f"{key}=null" in str(error)
        return
    assert np.isfinite(sample).all() and np.isfinite(scheduler.timesteps).all()
