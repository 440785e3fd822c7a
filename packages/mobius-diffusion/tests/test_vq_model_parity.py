"""VQModel parity: the encoder's latents and the unquantised decode against diffusers."""

from __future__ import annotations

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.validate import validate_package
from mobius_diffusion.config import ComponentConfig
from mobius_diffusion.models.vq_model import VQModelConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity

# Kandinsky 2.2's MoVQ (movq/config.json as the hub holds it, scaled down): attention in the
# last down block and the first up block, spatial norms of the latents in the decoder
MOVQ = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=["DownEncoderBlock2D", "AttnDownEncoderBlock2D"],
    up_block_types=["AttnUpDecoderBlock2D", "UpDecoderBlock2D"],
    block_out_channels=[32, 64],
    layers_per_block=1,
    latent_channels=4,
    num_vq_embeddings=12,
    norm_num_groups=8,
    norm_type="spatial",
    vq_embed_dim=4,
)
CASES = {
    "movq": MOVQ,
    # group norms throughout, a wider codebook than the latents, no mid-block attention
    "group-norm": dict(
        MOVQ,
        norm_type="group",
        block_out_channels=[8, 16],
        norm_num_groups=4,
        vq_embed_dim=6,
        mid_block_add_attention=False,
    ),
}

vq_reference = DIFFUSERS_CALLS["VQModel"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_vq_model_parity(case, tmp_path):
    config = CASES[case]
    rng = np.random.default_rng(0)
    latent = rng.standard_normal((2, config["vq_embed_dim"], 5, 6)).astype(np.float32)
    inputs = {
        "encoder/model": {"sample": rng.standard_normal((2, 3, 10, 12)).astype(np.float32)},
        "decoder/model": {"latent_sample": latent},
    }
    results = check_diffusion_parity("VQModel", config, inputs, vq_reference, tmp_path)
    print(case, [(r.ep, r.diffs) for r in results])
    if case == "movq":  # --validate's sample feeds fit the layout, and pass
        report = validate_package(tmp_path / "onnx-default", tmp_path / "hf")
        assert report.reference and report.diffs and report.passed, report.summary()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"lookup_from_codebook": True}, "lookup_from_codebook"),
        ({"norm_type": "ada_group"}, "norm_type 'ada_group'"),
        ({"vq_embed_dim": 6}, "vq_embed_dim == latent_channels"),
        ({"block_out_channels": [16, 64]}, r"do not split into the norms' \[8, 32\] groups"),
        ({"up_block_types": ["AttnUpDecoderBlock2D", "UpBlock2D"]}, "up_block_types 'UpBlock2D'"),
        ({"layers_per_block": "1"}, "layers_per_block must be a positive integer"),
    ],
)
def test_unbuilt_options_are_refused_by_name(change, named):
    fields = {"_class_name": "VQModel", **MOVQ, **change}
    with pytest.raises(ConfigError, match=named):
        VQModelConfig.from_hf(ComponentConfig(fields))
