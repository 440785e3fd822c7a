"""SanaControlNetModel parity: every block's residual against diffusers, and --validate."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.controlnet_sana import SanaControlNetConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    in_channels=4,
    out_channels=4,
    num_attention_heads=2,
    attention_head_dim=8,
    num_layers=2,
    num_cross_attention_heads=2,
    cross_attention_head_dim=8,
    cross_attention_dim=16,
    caption_channels=12,
    mlp_ratio=2.5,
    sample_size=8,
    patch_size=1,
)
CASES = {
    # Sana's ControlNets as the hub holds them: no position table (interpolation_scale null)
    "sana": BASE,
    # a position table (the condition gets it too), patches of 2, what else a config changes
    "positioned-patched": dict(
        BASE,
        num_layers=1,
        patch_size=2,
        interpolation_scale=1.0,
        attention_bias=True,
        norm_elementwise_affine=True,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_controlnet_sana_parity(case, tmp_path):
    rng = np.random.default_rng(0)
    mask = np.ones((2, 6), np.int64)
    mask[1, 4:] = 0  # the second prompt is shorter: its last two tokens are padding
    feed = {  # an 8x12 latent: a grid other than sample_size's
        "hidden_states": rng.standard_normal((2, 4, 8, 12)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 6, 12)).astype(np.float32),
        "encoder_attention_mask": mask,
        "timestep": np.array([10.0, 700.0], np.float32),
        "controlnet_cond": rng.standard_normal((2, 4, 8, 12)).astype(np.float32),
        "conditioning_scale": np.array(0.7, np.float32),
    }
    results = check_diffusion_parity(
        "SanaControlNetModel",
        CASES[case],
        {"model": feed},
        DIFFUSERS_CALLS["SanaControlNetModel"],
        tmp_path,
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "sana":  # --validate's sample feeds fit the hub's layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"cross_attention_dim": 32}, "cross_attention_dim 32"),
        ({"num_layers": "2"}, "num_layers must be a positive integer"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "SanaControlNetModel", **BASE, **change}
    with pytest.raises(ConfigError, match=named):
        SanaControlNetConfig.from_hf(ComponentConfig(fields))
