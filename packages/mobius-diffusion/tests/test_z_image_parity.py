"""Z-Image's transformer against diffusers: pad tokens, captions of different padded lengths."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.z_image import ZImageConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    all_patch_size=[2],
    all_f_patch_size=[1],
    in_channels=4,
    dim=32,
    n_layers=2,
    n_refiner_layers=1,
    n_heads=2,
    n_kv_heads=2,
    norm_eps=1e-5,
    qk_norm=True,
    cap_feat_dim=12,
    rope_theta=256.0,
    t_scale=1000.0,
    axes_dims=[4, 6, 6],
    axes_lens=[128, 16, 16],
)
CASES = {
    # Z-Image-Turbo's layout (config.json as the hub holds it, scaled down)
    "z-image": BASE,
    # what else a config changes: 1x1 patches, no q/k norms, the RoPE base, the time scale
    "patch1-no-qk-norm": dict(
        BASE, all_patch_size=[1], qk_norm=False, rope_theta=10000.0, t_scale=500.0
    ),
}
#: (latent grid, caption tokens, each row's caption length)
FEEDS = {
    # 4x6 patches (24, padded to 32); captions of 40 and 20 tokens padded to 64 and 32: the
    # joint sequences differ in length, so diffusers masks the batch padding
    "z-image": ((8, 12), 40, (40, 20)),
    # 60 patches (padded to 64); a caption of exactly 32 tokens (no pad token) and one of 7
    "patch1-no-qk-norm": ((6, 10), 32, (32, 7)),
}

transformer_output = DIFFUSERS_CALLS["ZImageTransformer2DModel"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_z_image_parity(case, tmp_path):
    (height, width), tokens, lengths = FEEDS[case]
    rng = np.random.default_rng(0)
    mask = np.zeros((2, tokens), np.int64)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    feed = {
        "hidden_states": rng.standard_normal((2, 4, height, width)).astype(np.float32),
        "timestep": np.array([0.1, 0.7], np.float32),
        "encoder_hidden_states": rng.standard_normal((2, tokens, 12)).astype(np.float32),
        "encoder_attention_mask": mask,
    }
    results = check_diffusion_parity(
        "ZImageTransformer2DModel", CASES[case], {"model": feed}, transformer_output, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "z-image":  # --validate's sample feeds fit the hub's layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"n_kv_heads": 1}, "n_kv_heads 1"),
        ({"siglip_feat_dim": 8}, "siglip_feat_dim"),
        ({"all_patch_size": [2, 1], "all_f_patch_size": [1, 1]}, "all_patch_size"),
        ({"all_f_patch_size": [2]}, "all_f_patch_size"),
        ({"axes_dims": [4, 4, 4]}, "axes_dims"),
        ({"qk_norm": "yes"}, "qk_norm"),
        ({"n_layers": "2"}, "n_layers must be a positive integer"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "ZImageTransformer2DModel", **BASE, **change}
    with pytest.raises(ConfigError, match=named):
        ZImageConfig.from_hf(ComponentConfig(fields))
