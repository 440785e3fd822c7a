"""AuraFlow transformer parity against diffusers."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.aura_flow import AuraFlowConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

CONFIG = dict(
    sample_size=8,
    patch_size=2,
    in_channels=4,
    num_mmdit_layers=2,
    num_single_dit_layers=2,
    attention_head_dim=8,
    num_attention_heads=2,
    joint_attention_dim=12,
    caption_projection_dim=16,
    out_channels=6,
    # a 6x6 table: the 4x6 patch grid below is cropped from its middle rows
    pos_embed_max_size=36,
)


def auraflow_inputs() -> dict[str, np.ndarray]:
    """An 8x12 latent (4x6 patches) and a 5-token prompt; timesteps as the pipeline's t / 1000."""
    rng = np.random.default_rng(0)
    return {
        "hidden_states": rng.standard_normal((2, 4, 8, 12)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((2, 5, 12)).astype(np.float32),
        "timestep": np.array([0.25, 0.8], np.float32),
    }


def test_auraflow_parity(tmp_path):
    results = check_diffusion_parity(
        "AuraFlowTransformer2DModel",
        CONFIG,
        {"model": auraflow_inputs()},
        DIFFUSERS_CALLS["AuraFlowTransformer2DModel"],
        tmp_path,
    )
    print([(r.ep, r.diffs) for r in results])
    # --validate's sample feeds fit the graph, and pass
    report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
    assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"caption_projection_dim": 24}, "caption_projection_dim 24 is not built"),
        ({"out_channels": None}, "out_channels must be a positive integer"),
        ({"pos_embed_max_size": 0}, "pos_embed_max_size must be a positive integer"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "AuraFlowTransformer2DModel", **CONFIG, **change}
    with pytest.raises(ConfigError, match=named):
        AuraFlowConfig.from_hf(ComponentConfig(fields))
