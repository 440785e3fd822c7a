"""Kandinsky 3's UNet against diffusers: conditional norms, masked text pooling and cross-attention."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.kandinsky3 import Kandinsky3Config
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

# Kandinsky 3 (unet/config.json as the hub holds it, scaled down): four levels, attention in
# the three deepest down levels and up levels
BASE = dict(
    in_channels=4,
    time_embedding_dim=32,
    groups=4,
    attention_head_dim=8,
    layers_per_block=2,
    block_out_channels=[16, 32, 32, 48],
    cross_attention_dim=24,
    encoder_hid_dim=12,
)
CASES = {
    "kandinsky3": BASE,
    # two levels: diffusers' reversed attention tuple then attends at every up level; three
    # resnet pairs a level, other groups and head widths
    "two-levels": dict(
        BASE,
        block_out_channels=[24, 32],
        layers_per_block=3,
        groups=2,
        attention_head_dim=4,
        time_embedding_dim=16,
    ),
}

unet_output = DIFFUSERS_CALLS["Kandinsky3UNet"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_kandinsky3_parity(case, tmp_path):
    config = CASES[case]
    rng = np.random.default_rng(0)
    mask = np.ones((2, 6), np.int64)
    mask[1, 4:] = 0  # the second prompt is shorter: its last two tokens are padding
    feed = {  # an 8x16 latent: halved by each level but the deepest
        "sample": rng.standard_normal((2, 4, 8, 16)).astype(np.float32),
        "timestep": np.array([250.0, 801.0], np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 6, 12)).astype(np.float32),
        "encoder_attention_mask": mask,
    }
    results = check_diffusion_parity(
        "Kandinsky3UNet", config, {"model": feed}, unet_output, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "kandinsky3":  # --validate's sample feeds fit the hub's layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"block_out_channels": [16, 32, 32, 48, 64]}, "at most 4 levels"),
        ({"layers_per_block": 1}, "layers_per_block must be at least 2"),
        ({"groups": 5}, "groups 5 do not split"),
        ({"attention_head_dim": 12}, "attention_head_dim 12 does not divide"),
        ({"layers_per_block": "2"}, "layers_per_block must be a positive integer"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "Kandinsky3UNet", **BASE, **change}
    with pytest.raises(ConfigError, match=named):
        Kandinsky3Config.from_hf(ComponentConfig(fields))
