"""The numpy multistep, ancestral, Heun, LCM and EDM schedulers against diffusers' own.

Each case runs both on the same random model outputs (and, where the sampler draws noise,
the same noise: diffusers gets it through ``variance_noise`` where its ``step`` takes it,
else through its module's ``randn_tensor``) and compares every step's sample.
"""

from __future__ import annotations

import inspect
import sys

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius_diffusion.schedulers import load_scheduler

SD = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", steps_offset=1)
# Wan 2.1's scheduler_config.json (its UniPC options), Sana's DPM-Solver++ flow options
WAN = dict(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
SANA = dict(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0)
# Playground v2.5's EDMDPMSolverMultistepScheduler options
PLAYGROUND = dict(sigma_min=0.002, sigma_max=80.0, sigma_data=0.5, solver_order=2)

DPM, UNIPC = "DPMSolverMultistepScheduler", "UniPCMultistepScheduler"
FLOW, LCM = "FlowMatchEulerDiscreteScheduler", "LCMScheduler"
EULER_A, HEUN = "EulerAncestralDiscreteScheduler", "HeunDiscreteScheduler"
EDM_EULER, EDM_DPM = "EDMEulerScheduler", "EDMDPMSolverMultistepScheduler"

#: name -> (class, config, set_timesteps keyword arguments, draws noise)
CASES = {
    "dpm-sd": (DPM, SD, dict(num_inference_steps=5), False),
    "dpm-order3-karras": (
        DPM,
        dict(solver_order=3, use_karras_sigmas=True),
        {"num_inference_steps": 6},
        False,
    ),
    "dpm-exponential-v-sigma-min": (
        DPM,
        dict(
            SD,
            prediction_type="v_prediction",
            use_exponential_sigmas=True,
            final_sigmas_type="sigma_min",
            lower_order_final=False,
        ),
        dict(num_inference_steps=4),
        False,
    ),
    "dpm-heun-trailing-sample": (
        DPM,
        dict(solver_type="heun", timestep_spacing="trailing", prediction_type="sample"),
        dict(num_inference_steps=4),
        False,
    ),
    "dpm-deis-logrho-leading": (
        DPM,
        dict(
            SD,
            algorithm_type="deis",
            solver_type="logrho",
            timestep_spacing="leading",
            final_sigmas_type="sigma_min",
        ),
        dict(num_inference_steps=4),
        False,
    ),
    "dpm-sde": (DPM, dict(SD, algorithm_type="sde-dpmsolver++"), dict(num_inference_steps=5), True),
    "dpm-sde-order3-heun-karras": (
        DPM,
        dict(
            algorithm_type="sde-dpmsolver++",
            solver_order=3,
            solver_type="heun",
            use_karras_sigmas=True,
        ),
        dict(num_inference_steps=6),
        True,
    ),
    "dpm-flow-sana": (DPM, SANA, dict(num_inference_steps=5), False),
    "dpm-flow-dynamic": (
        DPM,
        dict(SANA, use_dynamic_shifting=True),
        dict(num_inference_steps=4, mu=0.7),
        False,
    ),
    "dpm-clipped-learned-euler-final": (
        DPM,
        dict(
            beta_schedule="squaredcos_cap_v2",
            lambda_min_clipped=-5.1,
            variance_type="learned_range",
            euler_at_final=True,
        ),
        dict(num_inference_steps=4),
        False,
    ),
    "unipc-sd": (UNIPC, SD, dict(num_inference_steps=5), False),
    "unipc-bh1-order3-karras": (
        UNIPC,
        dict(
            solver_type="bh1", solver_order=3, use_karras_sigmas=True, final_sigmas_type="sigma_min"
        ),
        dict(num_inference_steps=6),
        False,
    ),
    "unipc-wan": (UNIPC, WAN, dict(num_inference_steps=5), False),
    "unipc-noise-v-exponential": (
        UNIPC,
        dict(
            SD,
            predict_x0=False,
            prediction_type="v_prediction",
            disable_corrector=[1],
            timestep_spacing="trailing",
            use_exponential_sigmas=True,
            final_sigmas_type="sigma_min",
        ),
        dict(num_inference_steps=4),
        False,
    ),
    "unipc-flow-dynamic-terminal": (
        UNIPC,
        dict(
            WAN,
            use_dynamic_shifting=True,
            time_shift_type="linear",
            shift_terminal=0.1,
            final_sigmas_type="sigma_min",
            solver_order=3,
        ),
        dict(num_inference_steps=6, mu=0.8),
        False,
    ),
    "unipc-flow-karras-heun-remap": (
        UNIPC,
        dict(WAN, use_karras_sigmas=True, solver_type="heun"),
        dict(num_inference_steps=4),
        False,
    ),
    "flow-karras": (
        FLOW,
        dict(shift=3.0, use_karras_sigmas=True),
        dict(num_inference_steps=4),
        False,
    ),
    "flow-exponential-dynamic": (
        FLOW,
        dict(use_dynamic_shifting=True, use_exponential_sigmas=True),
        dict(sigmas=np.linspace(1.0, 0.25, 4), mu=0.9),
        False,
    ),
    "flow-stochastic": (
        FLOW,
        dict(shift=3.0, stochastic_sampling=True),
        dict(num_inference_steps=4),
        True,
    ),
    "flow-inverted": (FLOW, dict(invert_sigmas=True), dict(num_inference_steps=3), False),
    "lcm-dreamshaper": (
        LCM,
        dict(SD, timestep_spacing="leading"),
        dict(num_inference_steps=4),
        True,
    ),
    "lcm-v-clip": (
        LCM,
        dict(
            prediction_type="v_prediction",
            clip_sample=True,
            clip_sample_range=0.8,
            set_alpha_to_one=False,
            original_inference_steps=20,
        ),
        dict(num_inference_steps=3),
        True,
    ),
    "euler-ancestral-sd": (
        EULER_A,
        dict(SD, timestep_spacing="leading"),
        dict(num_inference_steps=4),
        True,
    ),
    "euler-ancestral-v-trailing": (
        EULER_A,
        dict(prediction_type="v_prediction", timestep_spacing="trailing"),
        dict(num_inference_steps=3),
        True,
    ),
    "heun-sd": (HEUN, SD, dict(num_inference_steps=3), False),
    "heun-karras-v-clip": (
        HEUN,
        dict(prediction_type="v_prediction", use_karras_sigmas=True, clip_sample=True),
        dict(num_inference_steps=3),
        False,
    ),
    "heun-exponential-sample-leading": (
        HEUN,
        dict(SD, prediction_type="sample", use_exponential_sigmas=True, timestep_spacing="leading"),
        dict(num_inference_steps=3),
        False,
    ),
    "edm-euler-karras": (EDM_EULER, {}, dict(num_inference_steps=4), False),
    "edm-euler-exponential-v-sigma-min": (
        EDM_EULER,
        dict(
            sigma_schedule="exponential",
            prediction_type="v_prediction",
            final_sigmas_type="sigma_min",
        ),
        dict(num_inference_steps=4),
        False,
    ),
    "edm-dpm-playground": (EDM_DPM, PLAYGROUND, dict(num_inference_steps=5), False),
    "edm-dpm-order3-exponential-heun": (
        EDM_DPM,
        dict(solver_order=3, sigma_schedule="exponential", solver_type="heun"),
        dict(num_inference_steps=6),
        False,
    ),
    "edm-dpm-sde-sigma-min": (
        EDM_DPM,
        dict(algorithm_type="sde-dpmsolver++", solver_type="heun", final_sigmas_type="sigma_min"),
        dict(num_inference_steps=4),
        True,
    ),
}


def _reference_step(reference, monkeypatch, output, t, sample, noise):
    """diffusers' step, fed ``noise`` through ``variance_noise`` or its module's randn_tensor."""
    import torch

    if noise is None:
        return reference.step(output, t, sample).prev_sample
    noise = torch.from_numpy(noise)
    if "variance_noise" in inspect.signature(reference.step).parameters:
        return reference.step(output, t, sample, variance_noise=noise).prev_sample
    module = sys.modules[type(reference).__module__]
    monkeypatch.setattr(module, "randn_tensor", lambda *args, **kwargs: noise.clone())
    return reference.step(output, t, sample).prev_sample


@pytest.mark.parametrize("case", sorted(CASES))
def test_sampler_matches_diffusers(case, monkeypatch):
    import diffusers
    import torch

    name, config, schedule, noisy = CASES[case]
    reference = getattr(diffusers, name)(**config)
    ours = load_scheduler({"_class_name": name, "_diffusers_version": "0.42", **config})
    reference.set_timesteps(**schedule)
    ours.set_timesteps(**schedule)
    expected_t = reference.timesteps.numpy()
    assert ours.timesteps.dtype == expected_t.dtype, case
    # float timesteps (EDM's log sigma, flow sigmas) may round a float32 ulp apart
    np.testing.assert_allclose(ours.timesteps, expected_t, rtol=1e-6, atol=0)
    assert np.float32(ours.init_noise_sigma) == np.float32(
        getattr(reference, "init_noise_sigma", 1.0)
    )

    rng = np.random.default_rng(0)
    channels, out_channels = (3, 6) if config.get("variance_type") else (4, 4)
    sample = rng.standard_normal((1, channels, 4, 4)).astype(np.float32)
    sample = (sample * np.float32(ours.init_noise_sigma)).astype(np.float32)
    expected = torch.from_numpy(sample.copy())
    worst = 0.0
    for t_ours, t_ref in zip(ours.timesteps, reference.timesteps, strict=True):
        # (flow matching has no scale_model_input in diffusers: the sample goes in as it is)
        scale_input = getattr(reference, "scale_model_input", lambda x, t: x)
        scaled, scaled_ref = ours.scale_model_input(sample, t_ours), scale_input(expected, t_ref)
        np.testing.assert_allclose(
            scaled, scaled_ref.numpy(), rtol=0, atol=1e-5 * max(1.0, float(scaled_ref.abs().max()))
        )
        output = rng.standard_normal((1, out_channels, 4, 4)).astype(np.float32)
        noise = rng.standard_normal((1, channels, 4, 4)).astype(np.float32) if noisy else None
        sample = ours.step(output, t_ours, sample, **({"variance_noise": noise} if noisy else {}))
        expected = _reference_step(
            reference, monkeypatch, torch.from_numpy(output), t_ref, expected, noise
        )
        assert sample.dtype == np.float32
        diff = float(np.abs(sample - expected.numpy()).max())
        worst = max(worst, diff)
        # float32 rounding apart (a few ulps per step), the same numbers
        assert diff <= 1e-5 * max(1.0, float(expected.abs().max())), (case, diff)
    print(case, "max abs diff", worst)


def test_seeded_generator_draws_the_noise_a_runner_seeds():
    config = {"_class_name": EULER_A, **SD}
    seeded = load_scheduler(config, generator=np.random.default_rng(7))
    fed = load_scheduler(config)
    for scheduler in (seeded, fed):
        scheduler.set_timesteps(3)
    draws = np.random.default_rng(7)
    rng = np.random.default_rng(1)
    a = b = rng.standard_normal((1, 4, 4, 4)).astype(np.float32)
    for t in seeded.timesteps:
        output = rng.standard_normal(a.shape).astype(np.float32)
        a = seeded.step(output, t, a)
        b = fed.step(output, t, b, variance_noise=draws.standard_normal(a.shape, dtype=np.float32))
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "name, option, message",
    [
        (DPM, dict(thresholding=True), "thresholding=True"),
        (DPM, dict(algorithm_type="dpmsolver"), "algorithm_type='dpmsolver'"),
        (DPM, dict(use_lu_lambdas=True), "use_lu_lambdas=True"),
        (DPM, dict(use_beta_sigmas=True), "use_beta_sigmas=True"),
        (UNIPC, dict(rescale_betas_zero_snr=True), "rescale_betas_zero_snr=True"),
        (UNIPC, dict(predict_x0=False, prediction_type="flow_prediction"), "predict_x0=False"),
        # diffusers 0.42 steps to NaN at the final sigma 0 with these: refused, not mirrored
        (UNIPC, dict(solver_type="bh1"), "solver_type='bh1' with final_sigmas_type='zero'"),
        (UNIPC, dict(predict_x0=False), "predict_x0=False with final_sigmas_type='zero'"),
        (FLOW, dict(use_beta_sigmas=True), "use_beta_sigmas=True"),
        (
            HEUN,
            dict(use_karras_sigmas=True, use_exponential_sigmas=True),
            "use_karras_sigmas and use_exponential_sigmas: one at most",
        ),
        (HEUN, dict(use_beta_sigmas=True), "use_beta_sigmas=True"),
        (LCM, dict(thresholding=True), "thresholding=True"),
        (EULER_A, dict(prediction_type="sample"), "prediction_type='sample'"),
        (EDM_DPM, dict(algorithm_type="sde-dpmsolver++", solver_order=3), "solver_order=3"),
    ],
)
def test_unported_sampler_option_is_refused(name, option, message):
    with pytest.raises(ConfigError, match=message):
        load_scheduler({"_class_name": name, **option})


@pytest.mark.parametrize(
    "option, message",
    [
        (
            dict(solver_order="2"),
            "solver_order='2' in the scheduler config: expected a whole number",
        ),
        (dict(lower_order_final="yes"), "lower_order_final='yes'.*expected true or false"),
        (dict(flow_shift=[3.0]), r"flow_shift=\[3.0\].*expected a number"),
        (dict(num_train_timesteps=0), "num_train_timesteps=0 in the scheduler config"),
    ],
)
def test_config_value_of_the_wrong_type_is_refused(option, message):
    with pytest.raises(ConfigError, match=message):
        load_scheduler({"_class_name": DPM, **option})
