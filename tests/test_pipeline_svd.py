"""A tiny random Stable Video Diffusion pipeline: built whole with ``mobius build``, run by
mobius's numpy runner and by diffusers from the same latents and the same noise on the
conditioning image, 2 Euler steps (Karras sigmas, v-prediction, ``log(sigma) / 4``
timesteps) with the guidance ramped over 3 frames, decoded 2 frames at a time; the frames
agree to 1e-3 on [0, 1] (measured ~1.9e-5: on this image diffusers' float32 VAE encoder is
4e-5 from a float64 run of it, mobius's graph 2e-6).

Every parameter is perturbed (svd_pipeline_cases.py). The conditioning image is larger
than CLIP's 224 pixels, so the antialiasing blur of its resize is exercised, and the
video is smaller, so the VAE sees it resized.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from svd_pipeline_cases import FRAMES, make_svd_pipeline

from mobius.testing import build_with_cli

HEIGHT, WIDTH = 16, 24  # latents [1, 3, 4, 8, 12]
OPTIONS = dict(
    num_inference_steps=2,
    num_frames=FRAMES,
    height=HEIGHT,
    width=WIDTH,
    fps=6,
    motion_bucket_id=100,
    noise_aug_strength=0.1,
    decode_chunk_size=2,
)


def conditioning_image():
    from PIL import Image

    rng = np.random.default_rng(5)
    pixels = rng.integers(0, 256, (256, 300, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


@pytest.fixture(scope="module")
def svd(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("svd")
    pipe = make_svd_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def test_svd_builds_whole_and_matches_diffusers(svd, monkeypatch):
    import torch
    from diffusers.pipelines.stable_video_diffusion import pipeline_stable_video_diffusion

    from mobius_diffusion.pipeline import StableVideoDiffusionRunner, open_pipeline

    pipe, out = svd
    record = json.loads((out / "mobius.json").read_text())
    built = {m["graphs"][0]: m["model_type"] for m in record["models"]}
    assert built["image_encoder/model"] == "clip_vision_model"
    assert built["unet/model"] == "UNetSpatioTemporalConditionModel"
    assert built["vae/encoder/model"] == "AutoencoderKLTemporalDecoder"
    runner = open_pipeline(out)
    assert isinstance(runner, StableVideoDiffusionRunner)

    image = conditioning_image()
    latents = np.random.default_rng(1).standard_normal((1, FRAMES, 4, 8, 12)).astype(np.float32)
    noise = runner.augmentation_noise((1, 3, HEIGHT, WIDTH), 7)
    # diffusers draws the image's noise from its generator: give it the runner's
    monkeypatch.setattr(
        pipeline_stable_video_diffusion, "randn_tensor", lambda *a, **k: torch.from_numpy(noise)
    )
    options = dict(OPTIONS, min_guidance_scale=1.5)
    with torch.no_grad():
        expected = pipe(
            image,
            latents=torch.from_numpy(latents),
            max_guidance_scale=2.5,
            output_type="np",
            **options,
        ).frames
    got = runner(image, latents=latents, guidance_scale=2.5, seed=7, **options)
    assert got.shape == expected.shape == (1, FRAMES, HEIGHT, WIDTH, 3)
    assert float(expected.std()) > 1e-3, "the video barely depends on anything"
    diff = float(np.abs(got - expected).max())
    print("svd max abs diff", diff)
    assert diff <= 1e-3


def test_resize_with_antialiasing_is_the_pipelines():
    """The numpy port of the pipeline's blur-then-bicubic resize, on a strong downscale."""
    import torch
    from diffusers.pipelines.stable_video_diffusion.pipeline_stable_video_diffusion import (
        _resize_with_antialiasing,
    )

    from mobius_diffusion.pipelines.stable_video_diffusion import resize_with_antialiasing

    images = np.random.default_rng(0).uniform(-1, 1, (1, 3, 600, 500)).astype(np.float32)
    expected = _resize_with_antialiasing(torch.from_numpy(images), (224, 224)).numpy()
    got = resize_with_antialiasing(images, (224, 224))
    assert got.shape == expected.shape == (1, 3, 224, 224)
    assert float(np.abs(got - expected).max()) <= 1e-5


def test_generate_cli_writes_the_video(svd, tmp_path, capsys):
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out = svd
    image = tmp_path / "frame.png"
    conditioning_image().save(image)
    clip = tmp_path / "clip.webp"
    args = ["generate", str(out), "", "--image", str(image), "--steps", "2", "--seed", "3"]
    args += ["--height", str(HEIGHT), "--width", str(WIDTH), "--frames", str(FRAMES)]
    assert main([*args, "--output", str(clip)]) == 0
    with Image.open(clip) as video:
        assert (video.format, video.n_frames, video.size) == ("WEBP", FRAMES, (WIDTH, HEIGHT))
        video.seek(1)
        video.load()
        assert video.info["duration"] == 143  # SVD's 7 frames a second by default
    frames = tmp_path / "frames"
    frames.mkdir()
    assert main([*args, "--fps", "5", "--output", str(frames)]) == 0
    pipe = open_pipeline(out)
    expected = pipe(
        image, seed=3, num_inference_steps=2, num_frames=FRAMES, fps=5, height=HEIGHT, width=WIDTH
    )[0]  # --fps conditions the UNet too
    written = sorted(frames.iterdir())
    assert len(written) == FRAMES
    for path, frame in zip(written, to_pil(expected), strict=True):
        assert np.array_equal(np.asarray(Image.open(path)), np.asarray(frame))
    capsys.readouterr()
    for extra, message in (
        ([], "a StableVideoDiffusionPipeline takes no prompt"),
        (["--width", "20"], "SVD's height and width are multiples of 8"),
    ):
        bad = [*args, *extra]
        if not extra:
            bad[2] = "a cat"
        assert main(bad) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"mobius: error: {message}"), err
        assert len(err.splitlines()) == 1
