"""A tiny random LTX-Video pipeline: built whole with ``mobius build``, run by mobius's numpy
runner and by diffusers from the same packed latents, 2 flow-matching steps with CFG and its
rescale; the frames agree to 1e-3 on [0, 1] (measured figure at the comparison).

Every parameter is perturbed (see :mod:`ltx_pipeline_cases`). The decoder is conditioned on the
decode timestep and injects noise: diffusers' ``torch.randn`` draws at decode (the noise mixed
into the latents, then the decoder's) are replaced by the runner's seeded draws in the same
order, so the whole decode is compared, noise included. The prompt is shorter than
``max_sequence_length`` (the transformer's caption mask matters) and the frame rate is not
the default (it scales the rotary positions in time).
"""

from __future__ import annotations

import json
from unittest import mock

import numpy as np
import pytest
from ltx_pipeline_cases import make_ltx_pipeline
from pipeline_cases import PROMPT

from mobius.errors import ConfigError
from mobius.testing import build_with_cli

FRAMES, HEIGHT, WIDTH = 9, 32, 64  # latents [1, 4, 3, 4, 8]: 96 tokens
TOKENS, CHANNELS = 3 * 4 * 8, 4
OPTIONS = dict(num_inference_steps=2, num_frames=FRAMES, height=HEIGHT, width=WIDTH)


@pytest.fixture(scope="module")
def ltx(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("ltx")
    pipe = make_ltx_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def test_ltx_builds_whole_and_matches_diffusers(ltx):
    """Measured 2.7e-6 to 7.6e-6 (from run to run)."""
    import torch

    from mobius_diffusion.pipeline import LTXRunner, open_pipeline

    pipe, out = ltx
    record = json.loads((out / "mobius.json").read_text())
    built = {m["graphs"][0]: m["model_type"] for m in record["models"]}
    assert built["text_encoder/model"] == "T5EncoderModel"
    assert built["transformer/model"] == "LTXVideoTransformer3DModel"
    assert built["vae/encoder/model"] == "AutoencoderKLLTXVideo"
    runner = open_pipeline(out)
    assert isinstance(runner, LTXRunner)

    latents = np.random.default_rng(1).standard_normal((1, TOKENS, CHANNELS)).astype(np.float32)
    options = dict(
        OPTIONS,
        guidance_scale=4.0,
        guidance_rescale=0.7,
        negative_prompt="a blue bicycle",
        max_sequence_length=10,  # the prompt's 7 tokens and 3 pads
        decode_timestep=0.05,
        decode_noise_scale=0.3,
    )
    got = runner(PROMPT, latents=latents, seed=5, fps=24, **options)

    mixed, draws = runner.decode_noise((1, CHANNELS, 3, 4, 8), 5)
    assert list(draws) == [f"noise.{i}" for i in range(4)]
    pending = iter([mixed, *draws.values()])

    def randn(shape, **kwargs):  # diffusers' draws at decode, in order: the runner's
        noise = next(pending)
        assert tuple(noise.shape) == tuple(shape), f"noise {noise.shape} for {shape}"
        return torch.from_numpy(noise)

    with torch.no_grad(), mock.patch("torch.randn", randn):
        expected = pipe(
            PROMPT, latents=torch.from_numpy(latents), frame_rate=24, output_type="np", **options
        ).frames
    assert next(pending, None) is None, "diffusers drew fewer noises than the runner"
    assert got.shape == expected.shape == (1, FRAMES, HEIGHT, WIDTH, 3)
    assert float(expected.std()) > 1e-3, "the video barely depends on anything"
    diff = float(np.abs(got - expected).max())
    print("ltx max abs diff", diff)
    assert diff <= 1e-3


def test_generate_cli_writes_the_video(ltx, tmp_path, capsys):
    """``mobius generate``: an animation at 25 fps by default; ``--fps`` both conditions the
    transformer and times the frames, which are the runner's."""
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out = ltx
    clip, frames = tmp_path / "clip.webp", tmp_path / "frames"
    frames.mkdir()
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--frames", "5"]
    args += ["--height", str(HEIGHT), "--width", str(WIDTH)]
    assert main([*args, "--output", str(clip)]) == 0
    with Image.open(clip) as video:
        assert (video.format, video.n_frames, video.size) == ("WEBP", 5, (WIDTH, HEIGHT))
        video.seek(1)
        video.load()
        assert video.info["duration"] == 40  # 25 frames a second
    assert main([*args, "--fps", "12", "--output", str(frames)]) == 0
    options = dict(OPTIONS, num_frames=5)
    expected = open_pipeline(out)(PROMPT, seed=3, fps=12, **options)[0]
    written = sorted(frames.iterdir())
    assert len(written) == 5
    for path, frame in zip(written, to_pil(expected), strict=True):
        assert np.array_equal(np.asarray(Image.open(path)), np.asarray(frame))
    capsys.readouterr()

    for extra, message in (
        (["--frames", "6"], "an LTX video has 4k+1 frames (1, 5, 9...), not 6"),
        (["--width", "48"], "an LTX video's height and width are multiples of 32"),
        (["--steps", "1"], "an LTX scheduler with shift_terminal needs at least 2 steps, not 1"),
        (["--vae-tiling"], "--vae-tiling: mobius has no tiled decode for a AutoencoderKLLTXVideo"),
    ):
        assert main([*args, *extra]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"mobius: error: {message}"), err
        assert len(err.splitlines()) == 1


def test_packed_latents_of_another_shape_are_refused(ltx):
    from mobius_diffusion.pipeline import open_pipeline

    latents = np.zeros((1, CHANNELS, 3, 4, 8), np.float32)  # unpacked
    with pytest.raises(ConfigError, match=r"packed latents of shape \(1, 4, 3, 4, 8\) given"):
        open_pipeline(ltx[1])(PROMPT, latents=latents, **OPTIONS)
