"""Lumina Image 2.0's transformer against diffusers: refiners, joint blocks, caption padding."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.lumina2 import Lumina2Config
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    sample_size=8,
    patch_size=2,
    in_channels=4,
    hidden_size=32,
    num_layers=2,
    num_refiner_layers=1,
    num_attention_heads=2,
    num_kv_heads=1,  # grouped-query attention, as the hub's 24 heads over 8
    multiple_of=16,
    norm_eps=1e-5,
    axes_dim_rope=[4, 6, 6],
    axes_lens=[32, 16, 16],
    cap_feat_dim=12,
)
CASES = {
    # Lumina Image 2.0's layout (config.json as the hub holds it, scaled down)
    "lumina2": BASE,
    # what else a config changes: out_channels, the feed-forward multiplier, no GQA
    "out-channels-multiplier": dict(
        BASE, out_channels=8, ffn_dim_multiplier=1.3, num_kv_heads=2, patch_size=1
    ),
}

transformer_output = DIFFUSERS_CALLS["Lumina2Transformer2DModel"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_lumina2_parity(case, tmp_path):
    config = CASES[case]
    rng = np.random.default_rng(0)
    mask = np.ones((2, 6), np.int64)
    if case == "lumina2":
        mask[1, 4:] = 0  # the second prompt is shorter: its last two tokens are padding
    else:
        # padding first: diffusers still takes the first sum(mask) tokens as the caption,
        # and rotates the last ones by zero in the caption refiner (keys of zero, not masked)
        mask[1, :2] = 0
    feed = {  # an 8x12 latent: a grid other than sample_size's, not square
        "hidden_states": rng.standard_normal((2, 4, 8, 12)).astype(np.float32),
        "timestep": np.array([0.1, 0.7], np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 6, 12)).astype(np.float32),
        "encoder_attention_mask": mask,
    }
    results = check_diffusion_parity(
        "Lumina2Transformer2DModel", config, {"model": feed}, transformer_output, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "lumina2":  # --validate's sample feeds fit the hub's layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"axes_dim_rope": [4, 4, 4]}, "axes_dim_rope"),
        ({"num_kv_heads": 3}, "num_kv_heads 3"),
        ({"num_layers": "2"}, "num_layers must be a positive integer"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "Lumina2Transformer2DModel", **BASE, **change}
    with pytest.raises(ConfigError, match=named):
        Lumina2Config.from_hf(ComponentConfig(fields))
