"""HunyuanDiT's transformer against diffusers: CLIP + T5 text with padding rows, the T5 pooler,
the style/size conditioning, the in-graph 2-D RoPE of the pipeline's crop grid, the long skips."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.testing import run_module
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models._hunyuan_embeddings import HunyuanRotaryPosEmbed
from mobius_diffusion.models.hunyuan_dit import HunyuanDiTConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

V12 = dict(  # HunyuanDiT-v1.2-Diffusers' transformer/config.json, scaled down
    activation_fn="gelu-approximate",
    attention_head_dim=8,
    cross_attention_dim=12,
    cross_attention_dim_t5=16,
    hidden_size=16,
    in_channels=4,
    learn_sigma=True,
    mlp_ratio=4.3637,
    norm_type="layer_norm",
    num_attention_heads=2,
    num_layers=4,
    patch_size=2,
    pooled_projection_dim=12,
    sample_size=16,
    text_len=5,
    text_len_t5=6,
    use_style_cond_and_image_meta_size=False,
)
CASES = {
    # 1.2: no style nor size conditioning; a wide 8x12 latent (cropped rows in the RoPE)
    "v1.2": (V12, (8, 12)),
    # 1.0/1.1: the six sizes' sinusoids and the style embedding; no variance channels; two
    # skips to mirror; a tall latent (cropped columns)
    "v1.1-no-sigma": (
        dict(V12, use_style_cond_and_image_meta_size=True, learn_sigma=False, num_layers=6),
        (12, 8),
    ),
}

transformer_output = DIFFUSERS_CALLS["HunyuanDiT2DModel"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_hunyuan_dit_parity(case, tmp_path):
    config, (height, width) = CASES[case]
    rng = np.random.default_rng(0)
    mask, mask_t5 = np.ones((2, 5), np.int64), np.ones((2, 6), np.int64)
    mask[1, 3:] = 0  # the second prompt is shorter: padding rows stand in for its end
    mask_t5[1, 2:] = 0
    feed = {
        "hidden_states": rng.standard_normal((2, 4, height, width)).astype(np.float32),
        "timestep": np.array([10.0, 700.0], np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 5, 12)).astype(np.float32),
        "text_embedding_mask": mask,
        "encoder_hidden_states_t5": rng.standard_normal((2, 6, 16)).astype(np.float32),
        "text_embedding_mask_t5": mask_t5,
    }
    if config["use_style_cond_and_image_meta_size"]:
        sizes = [[1024, 768, 1024, 768, 0, 0], [512, 512, 768, 1024, 8, 4]]
        feed.update(image_meta_size=np.array(sizes, np.float32), style=np.zeros(2, np.int64))
    results = check_diffusion_parity(
        "HunyuanDiT2DModel", config, {"model": feed}, transformer_output, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
    # --validate's sample feeds fit both layouts, and pass
    report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
    assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize("grid", [(64, 64), (48, 80), (96, 56), (1, 7), (13, 3)])
def test_rotary_tables_match_the_pipeline(grid):
    """The graph's RoPE of a 1024-pixel-class grid (wider, taller, degenerate) and HunyuanDiT's
    88-channel heads, against the pipeline's ``image_rotary_emb`` (the parity runs 4x6 only)."""
    from diffusers.models.embeddings import get_2d_rotary_pos_embed
    from diffusers.pipelines.hunyuandit.pipeline_hunyuandit import get_resize_crop_region_for_grid

    rope = HunyuanRotaryPosEmbed(88, base_size=32)
    h, w = (np.array([n], np.int64) for n in grid)
    cos, sin = run_module(lambda op, h, w: rope(op, h, w), {"h": h, "w": w})
    expected = get_2d_rotary_pos_embed(88, get_resize_crop_region_for_grid(grid, 32), grid)
    # torch's vectorised linspace steps from each 8-lane chunk's start: positions up to 32 an
    # ulp (4e-6) apart from the graph's element-wise torch formula, so are the angles
    for got, want in zip((cos, sin), expected, strict=True):  # diffusers repeats each pair's
        np.testing.assert_allclose(got, want.numpy()[:, ::2], atol=1e-5)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"num_layers": 5}, "num_layers 5 must be even"),
        ({"hidden_size": 32}, "hidden_size must equal num_attention_heads x attention_head_dim"),
        ({"attention_head_dim": 6, "hidden_size": 12}, "attention_head_dim 6 must be a multiple"),
        ({"cross_attention_dim_t5": 12}, "cross_attention_dim_t5 12 must be a multiple"),
        ({"activation_fn": "geglu-approximate"}, "activation_fn 'geglu-approximate' is not"),
        ({"norm_type": "rms_norm"}, "norm_type 'rms_norm' is not built"),
        ({"learn_sigma": 1}, "learn_sigma must be true or false"),
        ({"in_channels": None}, "in_channels must be a positive integer"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "HunyuanDiT2DModel", **V12, **change}
    with pytest.raises(ConfigError, match=named):
        HunyuanDiTConfig.from_hf(ComponentConfig(fields))
