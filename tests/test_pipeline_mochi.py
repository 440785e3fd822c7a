"""A tiny random Mochi pipeline: built whole with ``mobius build``, run by mobius's numpy
runner and by diffusers from the same latents, 2 flow-matching steps over Mochi's
linear-quadratic sigmas with CFG; the frames agree to 1e-3 on [0, 1] (measured ~2.7e-6).

Every parameter is perturbed (see :mod:`mochi_pipeline_cases`). The prompts are shorter
than ``max_sequence_length``, so the T5 mask and the transformer's masked caption matter.
The pipeline sets ``force_zeros_for_empty_prompt``: the default negative prompt "" is
guided against an all-zero mask, a negative prompt of words against its T5 states.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from mochi_pipeline_cases import make_mochi_pipeline
from pipeline_cases import PROMPT

from mobius.testing import build_with_cli

FRAMES, HEIGHT, WIDTH = 7, 16, 32  # latents [1, 12, 2, 2, 4]: 1 x 2 patches a frame
OPTIONS = dict(num_inference_steps=2, num_frames=FRAMES, height=HEIGHT, width=WIDTH)
MAX_SEQUENCE_LENGTH = 10  # the prompt's 6 tokens and 4 pads


@pytest.fixture(scope="module")
def mochi(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("mochi")
    pipe = make_mochi_pipeline(root / "hf", force_zeros_for_empty_prompt=True)
    return pipe, build_with_cli(root / "hf", root / "onnx")


@pytest.mark.parametrize("negative_prompt", ["a blue bicycle", None])
def test_mochi_builds_whole_and_matches_diffusers(mochi, negative_prompt):
    import torch

    from mobius_diffusion.pipeline import MochiRunner, open_pipeline

    pipe, out = mochi
    record = json.loads((out / "mobius.json").read_text())
    built = {m["graphs"][0]: m["model_type"] for m in record["models"]}
    assert built["text_encoder/model"] == "T5EncoderModel"
    assert built["transformer/model"] == "MochiTransformer3DModel"
    assert built["vae/encoder/model"] == "AutoencoderKLMochi"
    runner = open_pipeline(out)
    assert isinstance(runner, MochiRunner)

    latents = np.random.default_rng(1).standard_normal((1, 12, 2, 2, 4)).astype(np.float32)
    options = dict(
        OPTIONS, negative_prompt=negative_prompt, max_sequence_length=MAX_SEQUENCE_LENGTH
    )
    with torch.no_grad():
        expected = pipe(
            PROMPT, latents=torch.from_numpy(latents), output_type="np", **options
        ).frames
    got = runner(PROMPT, latents=latents, **options)
    assert got.shape == expected.shape == (1, FRAMES, HEIGHT, WIDTH, 3)
    assert float(expected.std()) > 1e-3, "the video barely depends on anything"
    diff = float(np.abs(got - expected).max())
    print("mochi", negative_prompt, "max abs diff", diff)
    assert diff <= 1e-3


def test_generate_cli_writes_the_mochi_video(mochi, tmp_path, capsys):
    from PIL import Image

    from mobius.cli import main

    _, out = mochi
    clip = tmp_path / "clip.webp"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3"]
    args += ["--height", str(HEIGHT), "--width", str(WIDTH), "--frames", str(FRAMES)]
    assert main([*args, "--output", str(clip)]) == 0
    with Image.open(clip) as video:
        assert (video.format, video.n_frames, video.size) == ("WEBP", FRAMES, (WIDTH, HEIGHT))
    capsys.readouterr()
    for extra, message in (
        (["--frames", "6"], "a Mochi video has 6k+1 frames (1, 7, 13...), not 6"),
        (["--width", "24"], "a Mochi video's height and width are multiples of 16"),
        (["--steps", "1"], "a Mochi schedule takes at least 2 steps, not 1"),
    ):
        assert main([*args, *extra]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"mobius: error: {message}"), err
        assert len(err.splitlines()) == 1
