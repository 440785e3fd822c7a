"""SD3ControlNetModel parity: every block's residual against diffusers; unbuilt options refused."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.controlnet_sd3 import SD3ControlNetConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    sample_size=16,
    patch_size=2,
    in_channels=4,
    num_layers=2,
    attention_head_dim=8,
    num_attention_heads=2,
    joint_attention_dim=12,
    caption_projection_dim=16,
    pooled_projection_dim=10,
    out_channels=4,
    pos_embed_max_size=12,
)
CASES = {
    "sd3": BASE,
    # SD3.5 medium's blocks; an inpainting ControlNet's extra condition channel; no table
    "sd35-inpaint": dict(
        BASE,
        qk_norm="rms_norm",
        dual_attention_layers=[1],
        extra_conditioning_channels=1,
        pos_embed_max_size=None,
    ),
    # pos_embed_type null: no positions on the latents either
    "no-positions": dict(BASE, num_layers=1, pos_embed_type=None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_controlnet_sd3_parity(case, tmp_path):
    config = CASES[case]
    rng = np.random.default_rng(0)
    cond_channels = 4 + config.get("extra_conditioning_channels", 0)
    feed = {  # a 12x16 latent: a 6x8 patch grid
        "hidden_states": rng.standard_normal((2, 4, 12, 16)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 5, 12)).astype(np.float32),
        "pooled_projections": rng.standard_normal((2, 10)).astype(np.float32),
        "timestep": np.array([250.0, 800.0], np.float32),
        "controlnet_cond": rng.standard_normal((2, cond_channels, 12, 16)).astype(np.float32),
        "conditioning_scale": np.array(0.7, np.float32),
    }
    results = check_diffusion_parity(
        "SD3ControlNetModel",
        config,
        {"model": feed},
        DIFFUSERS_CALLS["SD3ControlNetModel"],
        tmp_path,
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "sd35-inpaint":  # --validate's sample feeds fit the layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"use_pos_embed": False}, "use_pos_embed"),
        ({"joint_attention_dim": None}, "joint_attention_dim"),
        ({"pos_embed_type": "learned"}, "pos_embed_type"),
        ({"extra_conditioning_channels": -1}, "extra_conditioning_channels"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "SD3ControlNetModel", **BASE, **change}
    with pytest.raises(ConfigError, match=named):
        SD3ControlNetConfig.from_hf(ComponentConfig(fields))
