"""AutoencoderKLWan parity: latent moments and decoded video against diffusers.

diffusers encodes the first frame, then chunks of 4 (the frames after the last
whole chunk are dropped) and decodes one latent frame at a time with conv caches:
7 frames take two chunks and drop two; 3 latent frames take three decoder
passes, so the caches and the first-frame rules of the temporal down- and
upsamples are exercised. A one-frame clip and latent (an image) take one pass
(and a VAE with one temporal downsample, a decoder width of its own). Wan 2.2's
layout adds the residual down/up blocks' shortcuts and 2x2 patching.

``decoder_step/model`` is diffusers' frame-by-frame decode itself: run one latent
frame at a time by :func:`~mobius_diffusion.tiling.decode_stepwise` (as the runners
do), its caches carried, it must equal diffusers' ``decode`` over 4 latent frames
(each temporal upsample's first-chunk rule crossed, and Wan 2.2's shortcut's); the
package is built with ``--validate``, which checks every graph, the step graph on
its first step over 3 latent frames, its caches against diffusers' ``feat_cache``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from mobius.errors import ConfigError
from mobius.testing import PARITY_ATOL, build_with_cli
from mobius_diffusion.models.autoencoder_kl_wan import AutoencoderKLWanConfig
from mobius_diffusion.testing import DIFFUSERS_CALLS, check_diffusion_parity
from mobius_diffusion.testing._parity import make_random_diffusers_model
from mobius_diffusion.tiling import decode_stepwise

BASE = dict(
    base_dim=8,
    z_dim=4,
    dim_mult=[1, 2, 2],
    num_res_blocks=1,
    temperal_downsample=[True, True],
)
WAN22 = dict(BASE, is_residual=True, patch_size=2, in_channels=12, out_channels=12)
CASES = {
    # (config, sample frames, latent frames, pixels per latent side)
    "wan2.1": (BASE, 7, 3, 4),
    "image": (dict(BASE, temperal_downsample=[False, True], decoder_base_dim=4), 1, 1, 4),
    "wan2.2": (dict(WAN22, decoder_base_dim=12), 5, 2, 8),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_autoencoder_kl_wan_parity(case, tmp_path):
    config, frames, latent_frames, scale = CASES[case]
    rng = np.random.default_rng(0)
    sample = rng.standard_normal((2, 3, frames, 2 * scale, 3 * scale)).astype(np.float32)
    latent = rng.standard_normal((2, 4, latent_frames, 2, 3)).astype(np.float32)
    inputs = {"encoder/model": {"sample": sample}, "decoder/model": {"latent_sample": latent}}
    results = check_diffusion_parity(
        "AutoencoderKLWan", config, inputs, DIFFUSERS_CALLS["AutoencoderKLWan"], tmp_path
    )
    print(case, [(r.ep, r.diffs) for r in results])


#: The frame-by-frame decode's VAEs: Wan 2.1's and Wan 2.2's layouts.
STEP_CASES = {"wan2.1": BASE, "wan2.2": CASES["wan2.2"][0]}


@pytest.fixture(scope="module", params=sorted(STEP_CASES))
def built_step(request, tmp_path_factory):
    """(case, diffusers VAE, package) of a tiny random VAE built with ``--validate``."""
    root = tmp_path_factory.mktemp(request.param)
    vae = make_random_diffusers_model("AutoencoderKLWan", STEP_CASES[request.param])
    vae.save_pretrained(root / "hf", safe_serialization=True)
    return request.param, vae, build_with_cli(root / "hf", root / "onnx", "--validate")


def step_decoder(package):
    """``decode(latents)`` of ``decoder_step/model`` frame by frame, as the runners decode."""
    import onnxruntime as ort

    path = package / "decoder_step" / "model.onnx"
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    past = {i.name: i.shape for i in session.get_inputs() if i.name != "latent_sample"}

    def step(feeds):
        return dict(zip(names, session.run(names, feeds), strict=True))

    return lambda latents: decode_stepwise(step, past, latents)


def test_frame_by_frame_decode_matches_diffusers(built_step):
    """Measured: 4.1e-6 (wan2.1), 2.6e-6 (wan2.2) apart."""
    import torch

    case, vae, package = built_step
    latents = np.random.default_rng(1).standard_normal((2, 4, 4, 2, 3)).astype(np.float32)
    got = step_decoder(package)(latents)
    with torch.no_grad():
        expected = vae.decode(torch.from_numpy(latents)).sample.numpy()
    assert got.shape == expected.shape == (2, 3, 13, *expected.shape[-2:])
    # the clamp to [-1, 1] hides what saturates: most pixels must not, for the check to count
    assert float(np.mean(np.abs(expected) < 1)) > 0.5
    diff = float(np.abs(got - expected).max())
    print(case, "max abs diff", diff)
    assert diff <= PARITY_ATOL * max(1.0, float(np.abs(expected).max()))


def test_every_graph_validates_against_diffusers(built_step):
    """``--validate`` ran the step graph too (its samples: a first step, no past frames)."""
    _, _, package = built_step
    validation = json.loads((package / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True, validation
    graphs = {name.partition(":")[0] for name in validation["diffs"]}
    assert graphs == {"encoder/model", "decoder/model", "decoder_step/model"}
    assert "decoder_step/model:present_frames.0" in validation["diffs"]


def test_a_step_input_of_no_known_size_is_refused():
    with pytest.raises(ConfigError, match="past_frames.0 has an axis 'rows'"):
        decode_stepwise(dict, {"past_frames.0": [1, 4, 0, "rows", 3]}, np.zeros((1, 4, 1, 2, 3)))


class _Fields:
    def __init__(self, **fields):
        self.__dict__.update(fields)


@pytest.mark.parametrize(
    "change, named",
    [
        (dict(is_residual=1), "is_residual"),
        (dict(patch_size=2), "patch_size"),
        (dict(temperal_downsample=[True]), "temperal_downsample"),
        (dict(temperal_downsample=[1, 0]), "temperal_downsample"),
        (dict(dim_mult=[1, 2, 2, 2], temperal_downsample=[True] * 3), "temporal downsamples"),
        (dict(base_dim=0), "base_dim"),
        (dict(attn_scales=[1.0]), "attn_scales"),
    ],
)
def test_autoencoder_kl_wan_refuses_what_it_does_not_build(change, named):
    with pytest.raises(ConfigError, match=named):
        AutoencoderKLWanConfig.from_hf(_Fields(**dict(BASE, **change)))
