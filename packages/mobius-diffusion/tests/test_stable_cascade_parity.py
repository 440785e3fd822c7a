"""Stable Cascade's UNet against diffusers: the prior (stage C) and the decoder (stage B)."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.stable_cascade import StableCascadeUNetConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

RES, TIMESTEP, ATTN = "SDCascadeResBlock", "SDCascadeTimestepBlock", "SDCascadeAttnBlock"

#: stage C's layout (stabilityai/stable-cascade-prior's config.json), scaled down: text, pooled
#: and image CLIP tokens, sca and crp, switch_level (a 1x1 conv, no resize, between levels)
PRIOR = dict(
    in_channels=4,
    out_channels=4,
    timestep_ratio_embedding_dim=64,
    patch_size=1,
    conditioning_dim=16,
    block_out_channels=[16, 16],
    num_attention_heads=[2, 2],
    down_num_layers_per_block=[1, 2],
    up_num_layers_per_block=[2, 1],
    down_blocks_repeat_mappers=[1, 1],
    up_blocks_repeat_mappers=[1, 1],
    block_types_per_layer=[[RES, TIMESTEP, ATTN], [RES, TIMESTEP, ATTN]],
    clip_text_in_channels=12,
    clip_text_pooled_in_channels=12,
    clip_image_in_channels=10,
    clip_seq=4,
    kernel_size=3,
    dropout=[0.1, 0.1],
    self_attn=True,
    timestep_conditioning_type=["sca", "crp"],
    switch_level=[False],
)
#: stage B's (stabilityai/stable-cascade's decoder): patches of 2, effnet and pixel mappers,
#: levels without attention, repeat mappers, strided (transposed) convs between levels
DECODER = dict(
    in_channels=4,
    out_channels=4,
    timestep_ratio_embedding_dim=64,
    patch_size=2,
    conditioning_dim=16,
    block_out_channels=[8, 16, 16],
    num_attention_heads=[-1, 2, 2],
    down_num_layers_per_block=[1, 1, 1],
    up_num_layers_per_block=[1, 1, 1],
    down_blocks_repeat_mappers=[1, 1, 1],
    up_blocks_repeat_mappers=[2, 2, 1],
    block_types_per_layer=[[RES, TIMESTEP], [RES, TIMESTEP, ATTN], [RES, TIMESTEP, ATTN]],
    clip_text_pooled_in_channels=12,
    clip_seq=4,
    effnet_in_channels=6,
    pixel_mapper_in_channels=3,
    kernel_size=3,
    dropout=[0, 0, 0.1],
    self_attn=True,
    timestep_conditioning_type=["sca"],
)
CASES = {
    "prior": PRIOR,
    "decoder": DECODER,
    # switch_level with the bilinear resize, no self-attention, an odd latent (skips resized)
    "switch-resize-odd": dict(
        DECODER, switch_level=[True, False], self_attn=False, timestep_conditioning_type=[]
    ),
}

unet_output = DIFFUSERS_CALLS["StableCascadeUNet"]


def _feed(case: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    # patches of 2, then 3 levels: the decoder's 4 x 6 -> 2 x 3 -> 1 x 1 -> 2 x 2 (skips resized);
    # the odd case's 5 x 7 -> 2 x 3 (bilinear) and back to 4 x 6 (skip resized)
    latent = (10, 14) if case == "switch-resize-odd" else (8, 12)

    def noise(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    feed = {
        "sample": noise(2, 4, *latent),
        "timestep_ratio": np.array([0.9, 0.35], np.float32),
        "clip_text_pooled": noise(2, 1, 12),
    }
    if case == "prior":
        feed.update(clip_text=noise(2, 5, 12), clip_img=noise(2, 1, 10))
    else:
        feed["effnet"] = noise(2, 6, 3, 4)  # resized to the latent grid
    return feed


@pytest.mark.parametrize("case", sorted(CASES))
def test_stable_cascade_parity(case, tmp_path):
    results = check_diffusion_parity(
        "StableCascadeUNet", CASES[case], {"model": _feed(case)}, unet_output, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "decoder":  # --validate's sample feeds fit the layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"clip_image_in_channels": None}, "both or neither"),
        ({"pixel_mapper_in_channels": 4}, "pixel_mapper_in_channels 4"),
        ({"num_attention_heads": [3, 2]}, "num_attention_heads 3"),
        ({"block_types_per_layer": [[RES], ["SDCascadeFooBlock"]]}, "SDCascadeFooBlock"),
        ({"switch_level": [False, True]}, "switch_level must give 1"),
        ({"kernel_size": 4}, "kernel_size 4"),
        ({"down_blocks_repeat_mappers": None}, "down_blocks_repeat_mappers"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "StableCascadeUNet", **PRIOR, **change}
    with pytest.raises(ConfigError, match=named):
        StableCascadeUNetConfig.from_hf(ComponentConfig(fields))
