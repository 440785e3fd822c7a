"""CogVideoXTransformer3DModel parity: sin-cos, RoPE, learned positions and the 1.5 layout.

The RoPE tables are the graph's inputs; the test makes them as the CogVideoX
pipelines do (``get_3d_rotary_pos_embed``, linspace grid with crops for 1.0,
slice grid for 1.5) and gives the same tables to diffusers.
"""

from __future__ import annotations

import numpy as np
import pytest

from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    num_attention_heads=2,
    attention_head_dim=16,
    in_channels=4,
    out_channels=4,
    time_embed_dim=16,
    text_embed_dim=12,
    num_layers=2,
    sample_width=8,
    sample_height=8,
    sample_frames=9,
    patch_size=2,
    max_text_seq_length=5,
)
ROTARY = dict(BASE, use_rotary_positional_embeddings=True)
CASES = {
    # (config, latent frames)
    "sincos": (dict(BASE, spatial_interpolation_scale=1.5, temporal_interpolation_scale=0.5), 3),
    "rotary": (dict(ROTARY, norm_elementwise_affine=False, attention_bias=False), 3),
    "learned": (dict(ROTARY, use_learned_positional_embeddings=True), 3),
    "learned-other-frames": (dict(ROTARY, use_learned_positional_embeddings=True), 2),
    "v1.5": (dict(ROTARY, patch_size_t=2, ofs_embed_dim=16, activation_fn="gelu"), 4),
}


def rotary_tables(config, frames, height, width):
    """``image_rotary_emb`` as the CogVideoX pipelines compute it for a latent of this size."""
    from diffusers.models.embeddings import get_3d_rotary_pos_embed
    from diffusers.pipelines.cogvideo.pipeline_cogvideox import get_resize_crop_region_for_grid

    p, p_t = config["patch_size"], config.get("patch_size_t")
    grid = (height // p, width // p)
    base_w, base_h = config["sample_width"] // p, config["sample_height"] // p
    if p_t is None:
        crops = get_resize_crop_region_for_grid(grid, base_w, base_h)
        cos, sin = get_3d_rotary_pos_embed(config["attention_head_dim"], crops, grid, frames)
    else:
        cos, sin = get_3d_rotary_pos_embed(
            config["attention_head_dim"],
            None,
            grid,
            (frames + p_t - 1) // p_t,
            grid_type="slice",
            max_size=(base_h, base_w),
        )
    return cos.float().numpy(), sin.float().numpy()


reference = DIFFUSERS_CALLS["CogVideoXTransformer3DModel"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_cogvideox_parity(case, tmp_path):
    config, frames = CASES[case]
    rng = np.random.default_rng(0)
    height = width = 8
    feed = {
        "hidden_states": rng.standard_normal((2, frames, 4, height, width)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 5, 12)).astype(np.float32),
        "timestep": np.array([10.0, 700.0], np.float32),
    }
    if config.get("ofs_embed_dim"):
        feed["ofs"] = np.array([2.0, 2.0], np.float32)
    if config.get("use_rotary_positional_embeddings"):
        feed["image_rotary_cos"], feed["image_rotary_sin"] = rotary_tables(
            config, frames, height, width
        )
    results = check_diffusion_parity(
        "CogVideoXTransformer3DModel", config, {"model": feed}, reference, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
