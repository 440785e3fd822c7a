"""AnimateDiff's UNetMotionModel against diffusers: motion modules over the frames folded into the batch."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.unet_motion import UNetMotionConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    block_out_channels=[16, 32],
    layers_per_block=1,
    norm_num_groups=8,
    cross_attention_dim=12,
    num_attention_heads=2,
    motion_num_attention_heads=2,
    motion_max_seq_length=8,
    down_block_types=["CrossAttnDownBlockMotion", "DownBlockMotion"],
    up_block_types=["UpBlockMotion", "CrossAttnUpBlockMotion"],
    use_motion_mid_block=False,
)
CASES = {
    # the hub's AnimateDiff layout (cross-attention blocks, a plain last block), no motion mid-block
    "animatediff": BASE,
    # what else a config changes: motion modules in a two-layer mid-block, deeper temporal
    # transformers, per-block heads, AnimateDiff SDXL's added text and time conditioning
    "motion-mid-block-sdxl": dict(
        BASE,
        use_motion_mid_block=True,
        mid_block_layers=2,
        temporal_transformer_layers_per_block=[1, 2],
        temporal_transformer_layers_per_mid_block=[2, 1],
        motion_num_attention_heads=[1, 2],
        num_attention_heads=[1, 2],
        addition_embed_type="text_time",
        addition_time_embed_dim=4,
        projection_class_embeddings_input_dim=6 * 4 + 10,
        act_fn="gelu",
    ),
}

unet_output = DIFFUSERS_CALLS["UNetMotionModel"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_animatediff_parity(case, tmp_path):
    config = CASES[case]
    rng = np.random.default_rng(0)
    feed = {  # 3 frames of a 6x10 latent: not a multiple of the downscale in width
        "sample": rng.standard_normal((2, 4, 3, 6, 10)).astype(np.float32),
        "timestep": np.array([20.0, 700.0], np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 5, 12)).astype(np.float32),
    }
    if config.get("addition_embed_type"):
        feed["text_embeds"] = rng.standard_normal((2, 10)).astype(np.float32)
        feed["time_ids"] = np.array([[64, 80, 0, 0, 64, 80], [32, 48, 4, 8, 32, 48]], np.float32)
    results = check_diffusion_parity(
        "UNetMotionModel", config, {"model": feed}, unet_output, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "animatediff":  # --validate's sample feeds fit the layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"down_block_types": ["CrossAttnDownBlock2D", "DownBlockMotion"]}, "blocks"),
        ({"encoder_hid_dim_type": "ip_image_proj"}, "encoder_hid_dim_type"),
        ({"motion_num_attention_heads": 3}, "does not split into heads"),
        ({"temporal_transformer_layers_per_block": "1"}, "not a positive integer"),
        ({"mid_block_layers": 2, "temporal_transformer_layers_per_mid_block": [1]}, "mid-block"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "UNetMotionModel", **BASE, **change}
    with pytest.raises(ConfigError, match=named):
        UNetMotionConfig.from_hf(ComponentConfig(fields))
