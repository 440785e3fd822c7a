"""FluxControlNetModel parity: every double- and single-block residual against diffusers."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.controlnet_flux import FluxControlNetConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    patch_size=1,
    in_channels=8,
    num_layers=2,
    num_single_layers=2,
    attention_head_dim=16,
    num_attention_heads=2,
    joint_attention_dim=12,
    pooled_projection_dim=10,
    axes_dims_rope=[4, 6, 6],
    guidance_embeds=True,
)
CASES = {
    "dev": BASE,
    # a union ControlNet (the mode token before the text), without guidance
    "union": dict(BASE, guidance_embeds=False, num_mode=3),
    # the condition image through input_hint_block, cut into 2x2 patches of 2 channels
    "hint": dict(BASE, num_layers=1, patch_size=2, conditioning_embedding_channels=2),
}


def controlnet_inputs(config: dict) -> dict[str, np.ndarray]:
    """Packed latents of a 4x6 grid, a 5-token prompt, the condition in the layout it takes."""
    rng = np.random.default_rng(0)
    rows, cols = np.meshgrid(np.arange(4), np.arange(6), indexing="ij")
    feed = {
        "hidden_states": rng.standard_normal((2, 24, 8)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 5, 12)).astype(np.float32),
        "pooled_projections": rng.standard_normal((2, 10)).astype(np.float32),
        "timestep": np.array([0.25, 0.8], np.float32),
        "img_ids": np.stack([np.zeros(24), rows.ravel(), cols.ravel()], 1).astype(np.float32),
        # distinct text ids: the mode token takes the first one's position
        "txt_ids": rng.integers(0, 4, (5, 3)).astype(np.float32),
        "controlnet_cond": rng.standard_normal((2, 24, 8)).astype(np.float32),
        "conditioning_scale": np.array(0.7, np.float32),
    }
    if config.get("conditioning_embedding_channels"):  # pixels: 8x the 4x6 grid of 2x2 patches
        feed["controlnet_cond"] = rng.standard_normal((2, 3, 64, 96)).astype(np.float32)
    if config.get("num_mode"):
        feed["controlnet_mode"] = np.array([[2], [0]], np.int64)
    if config["guidance_embeds"]:
        feed["guidance"] = np.array([3.5, 1.0], np.float32)
    return feed


@pytest.mark.parametrize("case", sorted(CASES))
def test_controlnet_flux_parity(case, tmp_path):
    config = CASES[case]
    results = check_diffusion_parity(
        "FluxControlNetModel",
        config,
        {"model": controlnet_inputs(config)},
        DIFFUSERS_CALLS["FluxControlNetModel"],
        tmp_path,
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case != "dev":  # --validate's sample feeds fit the mode input and the hint image, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"conditioning_embedding_channels": 3}, "conditioning_embedding_channels 3"),
        ({"num_mode": 0}, "num_mode"),
        ({"axes_dims_rope": [4, 6, 4]}, "axes_dims_rope"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "FluxControlNetModel", **BASE, **change}
    with pytest.raises(ConfigError, match=named):
        FluxControlNetConfig.from_hf(ComponentConfig(fields))
