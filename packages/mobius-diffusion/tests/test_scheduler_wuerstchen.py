"""DDPMWuerstchenScheduler (Stable Cascade, Würstchen) ported to numpy against diffusers' own,
step by step on the same model outputs and the same noise."""

from __future__ import annotations

import numpy as np
import pytest

from mobius_diffusion.schedulers import load_scheduler

CASES = {
    "stable-cascade": (dict(), 4),  # the hub's config: the defaults
    "scaler-above-one": (dict(scaler=1.5, s=0.01), 3),
    "scaler-below-one": (dict(scaler=0.7), 5),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_wuerstchen_ddpm_matches_diffusers(case, monkeypatch):
    """The pipelines' loop (every timestep but the last); diffusers' draws are replaced by a
    numpy generator's seeded as the port's. Its last step draws noise it multiplies by 0,
    which the port does not draw: the draws before it agree."""
    import torch
    from diffusers import DDPMWuerstchenScheduler
    from diffusers.schedulers import scheduling_ddpm_wuerstchen

    theirs_rng = np.random.default_rng(7)

    def numpy_randn(shape, **_):
        return torch.from_numpy(theirs_rng.standard_normal(tuple(shape), dtype=np.float32))

    monkeypatch.setattr(scheduling_ddpm_wuerstchen, "randn_tensor", numpy_randn)
    config, steps = CASES[case]
    reference = DDPMWuerstchenScheduler(**config)
    ours = load_scheduler(
        {"_class_name": "DDPMWuerstchenScheduler", **config}, generator=np.random.default_rng(7)
    )
    reference.set_timesteps(steps)
    ours.set_timesteps(steps)
    np.testing.assert_array_equal(ours.timesteps, reference.timesteps.numpy())

    rng = np.random.default_rng(0)
    sample = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    expected = torch.from_numpy(sample.copy())
    worst = 0.0
    for t in reference.timesteps[:-1]:
        output = rng.standard_normal(sample.shape).astype(np.float32)
        ratio = t.expand(2)  # as the pipelines pass it: one ratio per row
        sample = ours.step(output, ratio.numpy(), sample)
        expected = reference.step(torch.from_numpy(output), ratio, expected).prev_sample
        assert sample.dtype == np.float32
        worst = max(worst, float(np.abs(sample - expected.numpy()).max()))
    print(case, "max abs diff", worst)
    assert worst <= 1e-5 * max(1.0, float(expected.abs().max())), (case, worst)

    noised = ours.add_noise(sample, output, np.float32(0.3))
    theirs = reference.add_noise(
        torch.from_numpy(sample), torch.from_numpy(output), torch.tensor([0.3])
    )
    np.testing.assert_allclose(noised, theirs.numpy(), rtol=0, atol=1e-6)


def test_custom_timesteps_and_wrong_types_are_handled():
    from mobius.errors import ConfigError

    ours = load_scheduler({"_class_name": "DDPMWuerstchenScheduler"})
    ours.set_timesteps(timesteps=[1.0, 0.6, 0.2, 0.0])
    assert ours.previous_timestep(np.float32(0.6)) == np.float32(0.2)
    with pytest.raises(ConfigError, match="scaler"):
        load_scheduler({"_class_name": "DDPMWuerstchenScheduler", "scaler": "2"})
