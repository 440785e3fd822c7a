"""ControlNetModel parity: every down-block residual and the mid-block residual against diffusers."""

from __future__ import annotations

import numpy as np
import pytest

from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

SD15 = dict(
    in_channels=4,
    conditioning_channels=3,
    down_block_types=["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    block_out_channels=[8, 16, 16],
    layers_per_block=2,
    cross_attention_dim=12,
    attention_head_dim=2,
    norm_num_groups=4,
    conditioning_embedding_out_channels=[4, 8],
)
CASES = {
    "sd15": SD15,
    "sdxl": dict(
        SD15,
        down_block_types=["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
        block_out_channels=[8, 16, 24],
        attention_head_dim=[1, 2, 3],
        transformer_layers_per_block=[1, 2, 2],
        use_linear_projection=True,
        addition_embed_type="text_time",
        addition_time_embed_dim=4,
        projection_class_embeddings_input_dim=10 + 6 * 4,
        conditioning_embedding_out_channels=[4, 8, 8],
    ),
    # A small ControlNet: a resnet-only mid-block, BGR conditions, pooled residuals.
    "options": dict(
        SD15,
        layers_per_block=1,
        mid_block_type="UNetMidBlock2D",
        controlnet_conditioning_channel_order="bgr",
        global_pool_conditions=True,
        num_attention_heads=[1, 2, 4],
    ),
}


controlnet_reference = DIFFUSERS_CALLS["ControlNetModel"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_controlnet_parity(case, tmp_path):
    rng = np.random.default_rng(0)
    stride = 2 ** (len(CASES[case]["conditioning_embedding_out_channels"]) - 1)
    inputs = {
        "sample": rng.standard_normal((2, 4, 8, 6)).astype(np.float32),
        "timestep": np.array([3.5, 801.0], np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 7, 12)).astype(np.float32),
        "controlnet_cond": rng.standard_normal((2, 3, 8 * stride, 6 * stride)).astype(np.float32),
        "conditioning_scale": np.array(0.7, np.float32),
    }
    if case == "sdxl":
        inputs["text_embeds"] = rng.standard_normal((2, 10)).astype(np.float32)
        inputs["time_ids"] = np.array([[64, 48, 0, 8, 64, 64], [32, 32, 4, 0, 32, 32]], np.float32)
    results = check_diffusion_parity(
        "ControlNetModel", CASES[case], {"model": inputs}, controlnet_reference, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
