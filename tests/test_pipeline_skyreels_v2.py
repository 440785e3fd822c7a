"""A tiny random SkyReels-V2 text-to-video pipeline: built whole with ``mobius build``, run
by mobius's numpy runner and by diffusers from the same latents, 2 UniPC flow-sigma steps
with CFG; the frames agree to 1e-3 on [0, 1] (measured ~3.2e-6).

The pipeline is :mod:`skyreels_v2_pipeline_cases`'. The prompt is shorter than
``max_sequence_length``, so the states the pipeline zeroes past it matter. diffusers runs
the two guidance passes one by one, the runner batches them.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from pipeline_cases import PROMPT
from skyreels_v2_pipeline_cases import make_skyreels_v2_pipeline

from mobius.testing import build_with_cli

FRAMES, HEIGHT, WIDTH = 5, 16, 32  # latents [1, 4, 2, 4, 8]: 2 x 4 patches a frame
OPTIONS = dict(num_inference_steps=2, num_frames=FRAMES, height=HEIGHT, width=WIDTH)


@pytest.fixture(scope="module")
def skyreels(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("skyreels_v2")
    pipe = make_skyreels_v2_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def test_skyreels_v2_builds_whole_and_matches_diffusers(skyreels, monkeypatch):
    import types

    import torch
    from diffusers.pipelines.skyreels_v2 import pipeline_skyreels_v2

    from mobius_diffusion.pipeline import SkyReelsV2Runner, open_pipeline

    pipe, out = skyreels
    record = json.loads((out / "mobius.json").read_text())
    built = {m["graphs"][0]: m["model_type"] for m in record["models"]}
    assert built["text_encoder/model"] == "UMT5EncoderModel"
    assert built["transformer/model"] == "SkyReelsV2Transformer3DModel"
    runner = open_pipeline(out)
    assert isinstance(runner, SkyReelsV2Runner)

    latents = np.random.default_rng(1).standard_normal((1, 4, 2, 4, 8)).astype(np.float32)
    options = dict(OPTIONS, negative_prompt="a blue bicycle", max_sequence_length=10)
    # diffusers' SkyReels prompt cleaning calls ftfy even where it is not installed; ftfy
    # leaves this plain ASCII prompt as it is, as mobius's cleaning does
    if not hasattr(pipeline_skyreels_v2, "ftfy"):
        monkeypatch.setattr(
            pipeline_skyreels_v2, "ftfy", types.SimpleNamespace(fix_text=str), raising=False
        )
    with torch.no_grad():
        expected = pipe(
            PROMPT, latents=torch.from_numpy(latents), output_type="np", **options
        ).frames
    got = runner(PROMPT, latents=latents, **options)
    assert got.shape == expected.shape == (1, FRAMES, HEIGHT, WIDTH, 3)
    assert float(expected.std()) > 1e-3, "the video barely depends on anything"
    diff = float(np.abs(got - expected).max())
    print("skyreels-v2 max abs diff", diff)
    assert diff <= 1e-3


def test_generate_cli_writes_the_skyreels_video(skyreels, tmp_path):
    from PIL import Image

    from mobius.cli import main

    _, out = skyreels
    clip = tmp_path / "clip.webp"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(clip)]
    args += ["--height", str(HEIGHT), "--width", str(WIDTH), "--frames", str(FRAMES)]
    assert main(args) == 0
    with Image.open(clip) as video:
        assert (video.format, video.n_frames, video.size) == ("WEBP", FRAMES, (WIDTH, HEIGHT))


@pytest.mark.parametrize("field", ["inject_sample_info", "diffusion_forcing"])
def test_skyreels_v2_refuses_a_diffusion_forcing_transformer(skyreels, tmp_path, field):
    from mobius.errors import ConfigError
    from mobius_diffusion.pipeline import open_pipeline

    package = shutil.copytree(skyreels[1], tmp_path / "package")
    config_path = package / "transformer" / "config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, field: True}))
    with pytest.raises(ConfigError, match=field):
        open_pipeline(package)
