"""A tiny random AnimateDiff pipeline: built whole with ``mobius build``, run by mobius's numpy
runner and by diffusers from the same latents, 2 DDIM steps with CFG; the frames agree to 1e-3
on [0, 1] (measured 1.7e-6).

Every parameter is perturbed (:mod:`animatediff_pipeline_cases`), the saved
``motion_adapter`` apart from the unet's copy of its modules: the build leaves it out by
rule and says so, and the video still matches, so nothing of it is read. Frames are
decoded two at a time (``decode_chunk_size``).
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from animatediff_pipeline_cases import make_animatediff_pipeline
from pipeline_cases import PROMPT

from mobius.testing import build_with_cli

FRAMES, HEIGHT, WIDTH = 3, 16, 24  # latents [1, 4, 3, 8, 12]
OPTIONS = dict(num_inference_steps=2, guidance_scale=4.0, num_frames=FRAMES, height=HEIGHT)
OPTIONS.update(width=WIDTH, decode_chunk_size=2)


@pytest.fixture(scope="module")
def animatediff(tmp_path_factory):
    """(diffusers pipeline, built package directory, the build's log records)."""
    root = tmp_path_factory.mktemp("animatediff")
    pipe = make_animatediff_pipeline(root / "hf")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("mobius").addHandler(handler)
    try:
        out = build_with_cli(root / "hf", root / "onnx")
    finally:
        logging.getLogger("mobius").removeHandler(handler)
    return pipe, out, [r.getMessage() for r in records]


def test_animatediff_builds_whole_and_matches_diffusers(animatediff):
    import torch

    from mobius_diffusion.pipeline import AnimateDiffRunner, open_pipeline

    pipe, out, messages = animatediff
    record = json.loads((out / "mobius.json").read_text())
    built = {m["graphs"][0]: m["model_type"] for m in record["models"]}
    assert built["unet/model"] == "UNetMotionModel"
    assert not (out / "motion_adapter").exists()
    assert any("'motion_adapter' left out" in m for m in messages), messages
    runner = open_pipeline(out)
    assert isinstance(runner, AnimateDiffRunner)

    latents = np.random.default_rng(1).standard_normal((1, 4, FRAMES, 8, 12)).astype(np.float32)
    options = dict(OPTIONS, negative_prompt="a blue bicycle")
    with torch.no_grad():
        expected = pipe(
            PROMPT, latents=torch.from_numpy(latents), output_type="np", **options
        ).frames
    got = runner(PROMPT, latents=latents, **options)
    assert got.shape == expected.shape == (1, FRAMES, HEIGHT, WIDTH, 3)
    assert float(expected.std()) > 1e-3, "the video barely depends on anything"
    assert float(np.abs(np.diff(expected, axis=1)).max()) > 1e-3, "the frames are all alike"
    diff = float(np.abs(got - expected).max())
    print("animatediff max abs diff", diff)
    assert diff <= 1e-3


def test_generate_cli_writes_the_video(animatediff, tmp_path, capsys):
    from PIL import Image

    from mobius.cli import main

    _, out, _ = animatediff
    clip = tmp_path / "clip.webp"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3"]
    args += ["--height", str(HEIGHT), "--width", str(WIDTH), "--frames", str(FRAMES)]
    assert main([*args, "--output", str(clip)]) == 0
    with Image.open(clip) as video:
        assert (video.format, video.n_frames, video.size) == ("WEBP", FRAMES, (WIDTH, HEIGHT))
    capsys.readouterr()
    for extra, message in (
        (["--frames", "9"], "this AnimateDiff video has 1 to 8 frames, not 9"),
        (["--width", "25"], "an AnimateDiff video's height and width are multiples of 2"),
    ):
        assert main([*args, *extra]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"mobius: error: {message}"), err
        assert len(err.splitlines()) == 1


def test_a_2d_unet_with_its_motion_adapter_is_refused(tmp_path):
    """diffusers merges a motion_adapter into a 2-D unet at load; the build refuses that layout."""
    from mobius.errors import ConfigError
    from mobius_diffusion.pipeline_source import build_pipeline

    index = {
        "_class_name": "AnimateDiffPipeline",
        "unet": ["diffusers", "UNet2DConditionModel"],
        "motion_adapter": ["diffusers", "MotionAdapter"],
    }
    (tmp_path / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(ConfigError, match="only as part of a UNetMotionModel 'unet'"):
        build_pipeline(tmp_path)
