"""HunyuanVideo's transformer against diffusers: the token refiner with its mask, dual- and
single-stream blocks, 3-D rotary positions, guidance embedding, the pooled CLIP projection."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.hunyuan_video import HunyuanVideoConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    in_channels=4,
    out_channels=4,
    num_attention_heads=2,
    attention_head_dim=12,
    num_layers=1,
    num_single_layers=1,
    num_refiner_layers=1,
    patch_size=2,
    patch_size_t=1,
    text_embed_dim=12,
    pooled_projection_dim=10,
    rope_axes_dim=(4, 4, 4),
)
CASES = {
    # HunyuanVideo T2V's layout (guidance-distilled), scaled down; (config, frames)
    "hunyuan-video": (BASE, 3),
    # what else a config changes: I2V's latent_concat channels, no guidance, mlp_ratio,
    # temporal patches, two refiner blocks, another theta
    "latent-concat": (
        dict(
            BASE,
            in_channels=9,
            image_condition_type="latent_concat",
            guidance_embeds=False,
            mlp_ratio=2.5,
            patch_size_t=2,
            num_refiner_layers=2,
            rope_theta=10000.0,
        ),
        4,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hunyuan_video_parity(case, tmp_path):
    config, frames = CASES[case]
    rng = np.random.default_rng(0)
    mask = np.ones((2, 6), np.int64)
    if case == "hunyuan-video":
        mask[1, 4:] = 0  # the second prompt is shorter: its end is padding
    else:
        # padding first: the refiner masks these tokens, the blocks the last two (sum(mask))
        mask[1, :2] = 0
    feed = {  # a 4x6 latent: not square
        "hidden_states": rng.standard_normal((2, config["in_channels"], frames, 4, 6)).astype(
            np.float32
        ),
        "timestep": np.array([10.0, 700.0], np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 6, 12)).astype(np.float32),
        "encoder_attention_mask": mask,
        "pooled_projections": rng.standard_normal((2, 10)).astype(np.float32),
    }
    if config.get("guidance_embeds", True):
        feed["guidance"] = np.array([6000.0, 1000.0], np.float32)  # the pipeline's scale x 1000
    results = check_diffusion_parity(
        "HunyuanVideoTransformer3DModel",
        config,
        {"model": feed},
        DIFFUSERS_CALLS["HunyuanVideoTransformer3DModel"],
        tmp_path,
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "hunyuan-video":  # --validate's sample feeds fit the layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"image_condition_type": "token_replace"}, "image_condition_type"),
        ({"qk_norm": "layer_norm"}, "qk_norm"),
        ({"rope_axes_dim": [4, 4, 2]}, "rope_axes_dim"),
        ({"guidance_embeds": "yes"}, "guidance_embeds"),
        ({"num_layers": "2"}, "num_layers must be a positive integer|num_layers must be an"),
        ({"mlp_ratio": 0}, "mlp_ratio"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "HunyuanVideoTransformer3DModel", **BASE, **change}
    with pytest.raises(ConfigError, match=named):
        HunyuanVideoConfig.from_hf(ComponentConfig(fields))
