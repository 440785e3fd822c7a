"""Würstchen's Paella VQGAN (Stable Cascade's stage A) against diffusers: encode, and decode as
the pipelines call it (unquantized)."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.paella_vq import PaellaVQConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

#: stabilityai/stable-cascade's vqgan/config.json, scaled down (its 12 bottleneck blocks: 2)
BASE = dict(
    in_channels=3,
    out_channels=3,
    up_down_scale_factor=2,
    levels=2,
    bottleneck_blocks=2,
    embed_dim=16,
    latent_channels=4,
    num_vq_embeddings=32,
    scale_factor=0.3764,
)
CASES = {
    "stable-cascade": BASE,
    # three levels, a 4x pixel shuffle, one bottleneck block
    "three-levels": dict(BASE, levels=3, up_down_scale_factor=4, bottleneck_blocks=1),
}

vq_output = DIFFUSERS_CALLS["PaellaVQModel"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_paella_vq_parity(case, tmp_path):
    config = CASES[case]
    scale = config["up_down_scale_factor"] * 2 ** (config["levels"] - 1)
    rng = np.random.default_rng(0)
    feeds = {  # a 2x3 latent grid, not square
        "encoder/model": {"sample": rng.standard_normal((2, 3, 2 * scale, 3 * scale))},
        "decoder/model": {"latent_sample": rng.standard_normal((2, 4, 2, 3))},
    }
    feeds = {g: {k: v.astype(np.float32) for k, v in f.items()} for g, f in feeds.items()}
    results = check_diffusion_parity("PaellaVQModel", config, feeds, vq_output, tmp_path)
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "stable-cascade":  # --validate's sample feeds fit, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"embed_dim": 6, "levels": 3}, "embed_dim 6"),
        ({"bottleneck_blocks": 0}, "bottleneck_blocks must be a positive integer"),
        ({"scale_factor": "0.3"}, "scale_factor must be a positive number"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "PaellaVQModel", **BASE, **change}
    with pytest.raises(ConfigError, match=named):
        PaellaVQConfig.from_hf(ComponentConfig(fields))
