"""CogVideoXDDIMScheduler ported to numpy against diffusers' own, step by step on the same outputs."""

from __future__ import annotations

import numpy as np
import pytest

from mobius_diffusion.schedulers import load_scheduler

#: THUDM/CogVideoX-2b's scheduler/scheduler_config.json (its non-default fields).
HUB_2B = dict(
    clip_sample=False,
    prediction_type="v_prediction",
    rescale_betas_zero_snr=True,
    timestep_spacing="trailing",
)

CASES = {
    "hub-2b": (HUB_2B, 4),
    "leading-epsilon": (dict(steps_offset=1, set_alpha_to_one=False), 3),
    "linear-linspace-sample": (
        dict(beta_schedule="linear", timestep_spacing="linspace", prediction_type="sample"),
        3,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_cogvideox_ddim_matches_diffusers(case):
    import torch
    from diffusers import CogVideoXDDIMScheduler

    config, steps = CASES[case]
    reference = CogVideoXDDIMScheduler(**config)
    ours = load_scheduler({"_class_name": "CogVideoXDDIMScheduler", **config})
    reference.set_timesteps(steps)
    ours.set_timesteps(steps)
    np.testing.assert_array_equal(ours.timesteps, reference.timesteps.numpy())
    np.testing.assert_allclose(
        ours.alphas_cumprod, reference.alphas_cumprod.numpy(), rtol=0, atol=1e-12
    )

    rng = np.random.default_rng(0)
    sample = rng.standard_normal((1, 2, 4, 4, 4)).astype(np.float32)
    expected = torch.from_numpy(sample.copy())
    worst = 0.0
    for t in ours.timesteps:
        output = rng.standard_normal(sample.shape).astype(np.float32)
        sample = ours.step(output, t, sample)
        expected = reference.step(torch.from_numpy(output), int(t), expected).prev_sample
        assert sample.dtype == np.float32
        worst = max(worst, float(np.abs(sample - expected.numpy()).max()))
    print(case, "max abs diff", worst)
    assert worst <= 1e-6 * max(1.0, float(expected.abs().max())), (case, worst)


@pytest.mark.parametrize("case", sorted(CASES))
def test_cogvideox_dpm_matches_diffusers(case, monkeypatch):
    """Step by step with the same noise: diffusers' draws are replaced by a numpy generator's,
    seeded as the port's, so both draw the same numbers in the same order."""
    import torch
    from diffusers import CogVideoXDPMScheduler
    from diffusers.schedulers import scheduling_dpm_cogvideox

    theirs_rng = np.random.default_rng(7)

    def numpy_randn(shape, **_):
        return torch.from_numpy(theirs_rng.standard_normal(tuple(shape), dtype=np.float32))

    monkeypatch.setattr(scheduling_dpm_cogvideox, "randn_tensor", numpy_randn)
    config, steps = CASES[case]
    reference = CogVideoXDPMScheduler(**config)
    ours = load_scheduler(
        {"_class_name": "CogVideoXDPMScheduler", **config}, generator=np.random.default_rng(7)
    )
    reference.set_timesteps(steps)
    ours.set_timesteps(steps)
    np.testing.assert_array_equal(ours.timesteps, reference.timesteps.numpy())

    rng = np.random.default_rng(0)
    sample = rng.standard_normal((1, 2, 4, 4, 4)).astype(np.float32)
    expected, old_x0 = torch.from_numpy(sample.copy()), None
    worst = 0.0
    for i, t in enumerate(reference.timesteps):
        output = rng.standard_normal(sample.shape).astype(np.float32)
        sample = ours.step(output, t, sample)
        back = reference.timesteps[i - 1] if i > 0 else None
        expected, old_x0 = reference.step(torch.from_numpy(output), old_x0, t, back, expected)
        assert sample.dtype == np.float32
        worst = max(worst, float(np.abs(sample - expected.numpy()).max()))
    print(case, "dpm max abs diff", worst)
    assert worst <= 1e-5 * max(1.0, float(expected.abs().max())), (case, worst)
