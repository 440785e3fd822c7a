"""MochiTransformer3DModel against diffusers: joint attention of video and a padded caption,
the pooled caption, the learned 3-D rotary, the last block's caption left alone."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.mochi import MochiConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    patch_size=2,
    num_attention_heads=2,
    attention_head_dim=8,
    num_layers=2,
    pooled_projection_dim=12,  # the caption stream narrower than the video's 16, as the hub's
    in_channels=4,
    text_embed_dim=16,
    time_embed_dim=16,
    max_sequence_length=6,
)
CASES = {
    # (config, latent frames, latent height, latent width)
    "mochi": (BASE, 2, 4, 6),
    # out_channels of its own, one patch per pixel, three blocks, a square grid
    "out-channels": (dict(BASE, out_channels=6, patch_size=1, num_layers=3), 3, 4, 4),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mochi_parity(case, tmp_path):
    config, frames, height, width = CASES[case]
    rng = np.random.default_rng(0)
    mask = np.ones((2, 6), np.int64)
    mask[1, 3:] = 0  # the second prompt is shorter: its last three tokens are padding
    feed = {
        "hidden_states": rng.standard_normal((2, 4, frames, height, width)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 6, 16)).astype(np.float32),
        "timestep": np.array([990.0, 250.0], np.float32),
        "encoder_attention_mask": mask,
    }
    results = check_diffusion_parity(
        "MochiTransformer3DModel",
        config,
        {"model": feed},
        DIFFUSERS_CALLS["MochiTransformer3DModel"],
        tmp_path,
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "mochi":  # --validate's sample feeds fit the layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


#: transformer/config.json of genmo/mochi-1-preview, as the hub holds it.
HUB = {
    "_class_name": "MochiTransformer3DModel",
    "_diffusers_version": "0.32.0.dev0",
    "activation_fn": "swiglu",
    "attention_head_dim": 128,
    "in_channels": 12,
    "max_sequence_length": 256,
    "num_attention_heads": 24,
    "num_layers": 48,
    "out_channels": None,
    "patch_size": 2,
    "pooled_projection_dim": 1536,
    "qk_norm": "rms_norm",
    "text_embed_dim": 4096,
    "time_embed_dim": 256,
}


def test_mochi_reads_the_hub_config():
    config = MochiConfig.from_hf(ComponentConfig(HUB))
    assert (config.inner_dim, config.out_channels, config.num_layers) == (3072, 12, 48)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"activation_fn": "geglu"}, "activation_fn"),
        ({"qk_norm": "layer_norm"}, "qk_norm"),
        ({"attention_head_dim": 7}, "attention_head_dim"),
        ({"text_embed_dim": 12}, "text_embed_dim"),
        ({"num_layers": "2"}, "num_layers"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    with pytest.raises(ConfigError, match=named):
        MochiConfig.from_hf(ComponentConfig({**HUB, **change}))
