"""UNet2DModel (the unconditional DDPM / LDM UNet) against diffusers: attention down and up
blocks, the mid-block, the time embedding; a class-conditional, scale-shift variant."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.unet_2d import UNet2DConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

# google/ddpm-cat-256's layout in small: pixels in and out, a plain block then attention
# blocks (one head over the block's width: attention_head_dim null), the padded downsample.
DDPM = dict(
    sample_size=8,
    in_channels=3,
    out_channels=3,
    down_block_types=["DownBlock2D", "AttnDownBlock2D"],
    up_block_types=["AttnUpBlock2D", "UpBlock2D"],
    block_out_channels=[8, 16],
    layers_per_block=1,
    attention_head_dim=None,
    norm_num_groups=4,
    norm_eps=1e-6,
    downsample_padding=0,
)
# What else a config changes: three levels, heads of 4, class labels, scale-shift resnets
# (the mid-block attention's groups then given), center_input_sample, the sinusoid's
# options, a wider time embedding, the mid-block's output scale, learned variance channels.
CLASSES = dict(
    sample_size=8,
    in_channels=3,
    out_channels=6,
    down_block_types=["AttnDownBlock2D", "DownBlock2D", "AttnDownBlock2D"],
    up_block_types=["AttnUpBlock2D", "UpBlock2D", "AttnUpBlock2D"],
    block_out_channels=[8, 16, 16],
    layers_per_block=2,
    attention_head_dim=4,
    norm_num_groups=4,
    attn_norm_num_groups=4,
    resnet_time_scale_shift="scale_shift",
    num_class_embeds=5,
    center_input_sample=True,
    flip_sin_to_cos=False,
    freq_shift=1,
    time_embedding_dim=24,
    mid_block_scale_factor=1.4142135,
    act_fn="gelu",
)
CASES = {"ddpm": (DDPM, 2), "classes-scale-shift": (CLASSES, 4)}

unet_output = DIFFUSERS_CALLS["UNet2DModel"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_unet_2d_parity(case, tmp_path):
    config, factor = CASES[case]
    rng = np.random.default_rng(0)
    feed = {  # a grid other than sample_size's, not square
        "sample": rng.standard_normal((2, 3, 2 * factor, 3 * factor)).astype(np.float32),
        "timestep": np.array([999.0, 17.0], np.float32),
    }
    if "num_class_embeds" in config:
        feed["class_labels"] = np.array([4, 1], np.int64)
    results = check_diffusion_parity("UNet2DModel", config, {"model": feed}, unet_output, tmp_path)
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "ddpm":  # --validate's sample feeds fit the hub's layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"time_embedding_type": "fourier"}, "time_embedding_type 'fourier'"),
        ({"class_embed_type": "timestep"}, "class_embed_type 'timestep'"),
        ({"downsample_type": "resnet"}, "downsample_type 'resnet'"),
        ({"down_block_types": ["SkipDownBlock2D", "AttnDownBlock2D"]}, "SkipDownBlock2D"),
        ({"resnet_time_scale_shift": "scale_shift"}, "mid-block attention norm groups None"),
        ({"attn_norm_num_groups": 2}, "mid-block attention norm groups 2"),
        ({"layers_per_block": 0}, "layers_per_block must be a positive integer"),
        ({"norm_num_groups": 3}, "width 8 does not split into 3 groups"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "UNet2DModel", **DDPM, **change}
    with pytest.raises(ConfigError, match=named):
        UNet2DConfig.from_hf(ComponentConfig(fields))


def test_deprecated_attention_names_are_renamed():
    """Checkpoints saved before diffusers 0.14 name the attention ``query``... ``proj_attn``."""
    from mobius_diffusion.models.unet_2d import UNet2DModel

    model = UNet2DModel(
        UNet2DConfig.from_hf(ComponentConfig({"_class_name": "UNet2DModel", **DDPM}))
    )
    old = {
        "down_blocks.1.attentions.0.query.weight": 1,
        "mid_block.attentions.0.proj_attn.bias": 2,
        "up_blocks.0.attentions.1.key.weight": 3,
        "up_blocks.0.attentions.1.group_norm.weight": 4,
    }
    assert model.sanitize(old) == {
        "down_blocks.1.attentions.0.to_q.weight": 1,
        "mid_block.attentions.0.to_out.0.bias": 2,
        "up_blocks.0.attentions.1.to_k.weight": 3,
        "up_blocks.0.attentions.1.group_norm.weight": 4,
    }
