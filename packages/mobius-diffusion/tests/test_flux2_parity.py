"""Flux.2's transformer against diffusers: FLUX.2 dev's layout (guidance) and Klein's (none)."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.flux2 import Flux2Config
from mobius_diffusion.pipelines.flux2 import latent_ids
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    patch_size=1,
    in_channels=8,
    num_layers=1,
    num_single_layers=2,
    attention_head_dim=16,
    num_attention_heads=2,
    joint_attention_dim=12,
    timestep_guidance_channels=16,
    mlp_ratio=3.0,
    axes_dims_rope=[4, 4, 4, 4],
    rope_theta=2000,
    eps=1e-6,
)
CASES = {
    # FLUX.2 dev's layout (config.json as the hub holds it, scaled down): guidance embedded
    "dev": dict(BASE, guidance_embeds=True),
    # Klein's: no guidance embedding; what else a config changes: out_channels, the MLP ratio
    "klein-out-channels": dict(BASE, guidance_embeds=False, out_channels=4, mlp_ratio=2.5),
}

transformer_output = DIFFUSERS_CALLS["Flux2Transformer2DModel"]


def flux2_inputs(guidance: bool) -> dict[str, np.ndarray]:
    """Packed latents of a 4x6 grid and a 5-token prompt with the pipeline's image positions."""
    rng = np.random.default_rng(0)
    feed = {
        "hidden_states": rng.standard_normal((2, 24, 8)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 5, 12)).astype(np.float32),
        "timestep": np.array([0.25, 0.8], np.float32),
        "img_ids": latent_ids(4, 6),
        # the pipelines pass (0, 0, 0, token); random ids rotate every axis of the text too
        "txt_ids": rng.integers(0, 6, (5, 4)).astype(np.float32),
    }
    if guidance:
        feed["guidance"] = np.array([4.0, 1.0], np.float32)
    return feed


@pytest.mark.parametrize("case", sorted(CASES))
def test_flux2_parity(case, tmp_path):
    config = CASES[case]
    feed = flux2_inputs(config["guidance_embeds"])
    results = check_diffusion_parity(
        "Flux2Transformer2DModel", config, {"model": feed}, transformer_output, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "dev":  # --validate's sample feeds fit the hub's layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"axes_dims_rope": [4, 4, 4, 2]}, "axes_dims_rope"),
        ({"mlp_ratio": 0}, "mlp_ratio must be a positive number"),
        ({"num_layers": "2"}, "num_layers must be a positive integer"),
        ({"guidance_embeds": "yes"}, "guidance_embeds must be a bool"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "Flux2Transformer2DModel", **BASE, **change}
    with pytest.raises(ConfigError, match=named):
        Flux2Config.from_hf(ComponentConfig(fields))
