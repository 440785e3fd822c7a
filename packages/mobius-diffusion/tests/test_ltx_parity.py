"""LTXVideoTransformer3DModel parity: LTX-Video's layout and what else its config changes.

The rotary positions are built in the graph from the token grid (``video_shape``)
and the pipeline's ``rope_interpolation_scale``; diffusers takes them as numbers.
"""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.ltx import LTXVideoConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(  # Lightricks/LTX-Video's transformer/config.json, scaled down
    in_channels=8,
    out_channels=8,
    patch_size=1,
    patch_size_t=1,
    num_attention_heads=2,
    attention_head_dim=8,  # inner dim 16: 16 % 6 channels are not rotated, as the hub's 2048
    cross_attention_dim=16,
    num_layers=2,
    activation_fn="gelu-approximate",
    qk_norm="rms_norm_across_heads",
    norm_elementwise_affine=False,
    norm_eps=1e-6,
    caption_channels=12,
    attention_bias=True,
    attention_out_bias=True,
)
CASES = {
    "ltx-video": BASE,
    # what else a config changes: norms with weights, no attention biases, patches (the
    # rotary coordinates' scale), an inner dim of whole frequency triples, other widths
    "affine-no-bias-patches": dict(
        BASE,
        out_channels=6,
        attention_head_dim=12,
        cross_attention_dim=24,
        norm_elementwise_affine=True,
        attention_bias=False,
        attention_out_bias=False,
        patch_size=2,
        patch_size_t=2,
        activation_fn="gelu",
        norm_eps=1e-5,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_ltx_parity(case, tmp_path):
    config = CASES[case]
    rng = np.random.default_rng(0)
    frames, rows, columns = 3, 4, 5
    mask = np.ones((2, 6), np.int64)
    mask[1, 4:] = 0  # the second prompt is shorter: its last two tokens are padding
    feed = {
        "hidden_states": rng.standard_normal((2, frames * rows * columns, 8)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 6, 12)).astype(np.float32),
        "encoder_attention_mask": mask,
        "timestep": np.array([10.0, 700.0], np.float32),
        "video_shape": np.array([frames, rows, columns], np.int64),
        # the pipeline's (temporal compression / frame rate, spatial, spatial) at 25 fps
        "rope_interpolation_scale": np.array([8 / 25, 32, 32], np.float32),
    }
    results = check_diffusion_parity(
        "LTXVideoTransformer3DModel",
        config,
        {"model": feed},
        DIFFUSERS_CALLS["LTXVideoTransformer3DModel"],
        tmp_path,
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "ltx-video":  # --validate's sample feeds fit the hub's layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"qk_norm": "rms_norm"}, "qk_norm"),
        ({"cross_attention_dim": 32}, "cross_attention_dim 32"),
        ({"activation_fn": "linear-gelu"}, "activation_fn"),
        ({"num_layers": "2"}, "num_layers must be a positive integer"),
        ({"attention_bias": 1}, "attention_bias must be true or false"),
        (
            {"num_attention_heads": 3, "attention_head_dim": 7, "cross_attention_dim": 21},
            "must be even",
        ),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "LTXVideoTransformer3DModel", **BASE, **change}
    with pytest.raises(ConfigError, match=named):
        LTXVideoConfig.from_hf(ComponentConfig(fields))
