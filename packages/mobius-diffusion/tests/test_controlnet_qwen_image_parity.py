"""QwenImageControlNetModel parity: every block's residual against diffusers, and --validate."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.controlnet_qwen_image import QwenImageControlNetConfig
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
#: The inpainting ControlNet's condition carries the mask's channels after the latents'.
CASES = {"controlnet": CONFIG, "inpaint": dict(CONFIG, num_layers=1, extra_condition_channels=4)}


def controlnet_inputs(config: dict) -> dict[str, np.ndarray]:
    """Packed latents of a 3x4 patch grid, a 5-token prompt whose second row ends in padding."""
    rng = np.random.default_rng(0)
    mask = np.ones((2, 5), np.int64)
    mask[1, -2:] = 0
    cond_channels = 16 + config.get("extra_condition_channels", 0)
    return {
        "hidden_states": rng.standard_normal((2, 12, 16)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 5, 12)).astype(np.float32),
        "encoder_hidden_states_mask": mask,
        "timestep": np.array([0.25, 0.8], np.float32),
        "img_shapes": np.array([(1, 3, 4)], np.int64),
        "controlnet_cond": rng.standard_normal((2, 12, cond_channels)).astype(np.float32),
        "conditioning_scale": np.array(0.7, np.float32),
    }


@pytest.mark.parametrize("case", sorted(CASES))
def test_controlnet_qwen_image_parity(case, tmp_path):
    config = CASES[case]
    results = check_diffusion_parity(
        "QwenImageControlNetModel",
        config,
        {"model": controlnet_inputs(config)},
        DIFFUSERS_CALLS["QwenImageControlNetModel"],
        tmp_path,
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "inpaint":  # --validate's sample feeds fit the layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"extra_condition_channels": -4}, "extra_condition_channels"),
        ({"axes_dims_rope": [4, 6, 4]}, "axes_dims_rope"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "QwenImageControlNetModel", **CONFIG, **change}
    with pytest.raises(ConfigError, match=named):
        QwenImageControlNetConfig.from_hf(ComponentConfig(fields))
