"""HiDream-I1's transformer against diffusers: both block kinds, the experts, non-square padding."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.hidream import HiDreamImageConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

BASE = dict(
    patch_size=2,
    in_channels=4,
    num_layers=1,
    num_single_layers=1,
    attention_head_dim=16,
    num_attention_heads=2,
    caption_channels=[12, 10],  # T5's width, Llama's
    text_emb_dim=8,
    num_routed_experts=4,
    num_activated_experts=2,
    axes_dims_rope=[4, 6, 6],
    max_resolution=[8, 16],  # 32 tokens: an 8 x 12 latent (24 patches) is padded by 8
    llama_layers=[2, 0],
)
CASES = {
    # HiDream-I1's layout (config.json as the hub holds it, scaled down)
    "hidream": BASE,
    # rotary on half of each head, out_channels, one active expert of three, a square grid
    "half-rotary-top-1": dict(
        BASE,
        axes_dims_rope=[2, 2, 4],
        out_channels=8,
        num_routed_experts=3,
        num_activated_experts=1,
        num_layers=2,
        llama_layers=[1, 1, 2],
    ),
    # no routed experts: one SwiGLU feed-forward; no single blocks; 1x1 patches
    "no-experts": dict(
        BASE, num_routed_experts=0, num_single_layers=0, patch_size=1, llama_layers=[2]
    ),
}

transformer_output = DIFFUSERS_CALLS["HiDreamImageTransformer2DModel"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_hidream_parity(case, tmp_path):
    config = CASES[case]
    rng = np.random.default_rng(0)
    latent = (8, 8) if case == "half-rotary-top-1" else (8, 12)
    feed = {
        "hidden_states": rng.standard_normal((2, 4, *latent)).astype(np.float32),
        "timestep": np.array([250.0, 800.0], np.float32),
        "encoder_hidden_states_t5": rng.standard_normal((2, 5, 12)).astype(np.float32),
        # transformers' hidden_states[1:] of a 3-layer Llama, stacked
        "encoder_hidden_states_llama3": rng.standard_normal((3, 2, 4, 10)).astype(np.float32),
        "pooled_embeds": rng.standard_normal((2, 8)).astype(np.float32),
    }
    results = check_diffusion_parity(
        "HiDreamImageTransformer2DModel", config, {"model": feed}, transformer_output, tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "hidream":  # --validate's sample feeds fit the hub's layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"axes_dims_rope": [4, 4]}, "axes_dims_rope must list 3 integers"),
        ({"axes_dims_rope": [4, 4, 4]}, "sum to attention_head_dim 16 or its half"),
        ({"llama_layers": [0]}, "llama_layers must list 2 integers"),
        ({"num_activated_experts": 5}, "num_activated_experts 5 is more than"),
        ({"patch_size": None}, "patch_size must be a positive integer"),
        ({"num_layers": 0, "num_single_layers": 0}, "has no blocks"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "HiDreamImageTransformer2DModel", **BASE, **change}
    with pytest.raises(ConfigError, match=named):
        HiDreamImageConfig.from_hf(ComponentConfig(fields))
