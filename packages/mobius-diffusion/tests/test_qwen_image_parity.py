"""Qwen-Image transformer parity against diffusers: text to image, and the edit layout."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.qwen_image import QwenImageConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

CONFIG = dict(
    patch_size=2,
    in_channels=16,
    out_channels=4,
    num_layers=2,
    attention_head_dim=16,
    num_attention_heads=2,
    joint_attention_dim=12,
    axes_dims_rope=[4, 6, 6],
)
#: (frames, rows, columns) of each image, in token order. Odd sides exercise the
#: centred grid's uneven halves; "edit" appends a condition image as the edit pipelines do.
#: Qwen/Qwen-Image's transformer/config.json as the hub holds it (Qwen-Image-Edit and
#: Edit-2509 hold the same); ``pooled_projection_dim`` is read by nobody.
HUB_QWEN_IMAGE = {
    "_class_name": "QwenImageTransformer2DModel",
    "attention_head_dim": 128,
    "axes_dims_rope": [16, 56, 56],
    "guidance_embeds": False,
    "in_channels": 64,
    "joint_attention_dim": 3584,
    "num_attention_heads": 24,
    "num_layers": 60,
    "out_channels": 16,
    "patch_size": 2,
    "pooled_projection_dim": 768,
}
CASES = {
    "text2image": [(1, 3, 4)],
    "edit": [(1, 3, 4), (1, 2, 5)],
    "edit-2511": [(1, 3, 4), (1, 2, 5)],
}
#: Qwen-Image-Edit-2511 modulates the condition images from timestep 0.
CONFIGS = {"edit-2511": dict(CONFIG, zero_cond_t=True)}


def qwen_image_inputs(img_shapes) -> dict[str, np.ndarray]:
    """Packed latents of the images, a 5-token prompt whose second row ends in padding."""
    rng = np.random.default_rng(0)
    tokens = sum(f * h * w for f, h, w in img_shapes)
    mask = np.ones((2, 5), np.int64)
    mask[1, -2:] = 0
    return {
        "hidden_states": rng.standard_normal((2, tokens, 16)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 5, 12)).astype(np.float32),
        "encoder_hidden_states_mask": mask,
        "timestep": np.array([0.25, 0.8], np.float32),
        "img_shapes": np.array(img_shapes, np.int64),
    }


@pytest.mark.parametrize("case", sorted(CASES))
def test_qwen_image_parity(case, tmp_path):
    feed = qwen_image_inputs(CASES[case])
    results = check_diffusion_parity(
        "QwenImageTransformer2DModel",
        CONFIGS.get(case, CONFIG),
        {"model": feed},
        DIFFUSERS_CALLS["QwenImageTransformer2DModel"],
        tmp_path,
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "text2image":  # --validate's sample feeds fit the layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


def test_hub_config_is_read():
    config = QwenImageConfig.from_hf(ComponentConfig(HUB_QWEN_IMAGE))
    assert (config.inner_dim, config.out_channels, config.axes_dims_rope) == (
        3072,
        16,
        (16, 56, 56),
    )
    # Qwen-Image-Edit-2511's config adds zero_cond_t
    edit_2511 = ComponentConfig({**HUB_QWEN_IMAGE, "zero_cond_t": True})
    assert QwenImageConfig.from_hf(edit_2511).zero_cond_t


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"zero_cond_t": 1}, "zero_cond_t"),
        ({"use_additional_t_cond": True}, "use_additional_t_cond"),
        ({"use_layer3d_rope": True}, "use_layer3d_rope"),
        ({"guidance_embeds": True}, "guidance_embeds"),
        ({"axes_dims_rope": [16, 56, 50]}, "axes_dims_rope"),
        ({"num_layers": "2"}, "num_layers must be a positive integer"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {**HUB_QWEN_IMAGE, **change}
    with pytest.raises(ConfigError, match=named):
        QwenImageConfig.from_hf(ComponentConfig(fields))
