"""CogView3-Plus's transformer against diffusers: CogView4's joint blocks on a sin-cos table."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.cogview3plus import CogView3PlusConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    patch_size=2,
    in_channels=4,
    out_channels=4,
    num_layers=2,
    attention_head_dim=8,
    num_attention_heads=2,
    text_embed_dim=12,
    time_embed_dim=12,
    condition_dim=6,
    pos_embed_max_size=16,
    sample_size=8,
)
CASES = {
    # CogView3-Plus-3B's layout (config.json as the hub holds it, scaled down)
    "cogview3plus": BASE,
    # what else a config changes: other output channels, 1x1 patches on a table just big enough
    "out-channels-patch1": dict(
        BASE, out_channels=8, patch_size=1, condition_dim=5, pos_embed_max_size=12
    ),
}

transformer_output = DIFFUSERS_CALLS["CogView3PlusTransformer2DModel"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_cogview3plus_parity(case, tmp_path):
    config = CASES[case]
    rng = np.random.default_rng(0)
    feed = {  # an 8x12 latent: a grid other than sample_size's, not square
        "hidden_states": rng.standard_normal((2, 4, 8, 12)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 5, 12)).astype(np.float32),
        "timestep": np.array([10.0, 700.0], np.float32),
        "original_size": np.array([[64, 96], [96, 64]], np.float32),
        "target_size": np.array([[64, 96], [64, 96]], np.float32),
        "crop_coords": np.array([[0, 0], [8, 4]], np.float32),
    }
    results = check_diffusion_parity(
        "CogView3PlusTransformer2DModel", config, {"model": feed}, transformer_output, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "cogview3plus":  # --validate's sample feeds fit the hub's layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"attention_head_dim": 3}, "attention_head_dim 6 must be a multiple of 4"),
        ({"pos_embed_max_size": 0}, "pos_embed_max_size must be a positive integer"),
        ({"num_layers": "2"}, "num_layers must be a positive integer"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "CogView3PlusTransformer2DModel", **BASE, **change}
    with pytest.raises(ConfigError, match=named):
        CogView3PlusConfig.from_hf(ComponentConfig(fields))
