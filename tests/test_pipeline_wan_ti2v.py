"""A tiny random Wan 2.2 TI2V pipeline (``expand_timesteps``: a timestep per video token), built
whole with ``mobius build`` and run by mobius's numpy runner and by diffusers from the same
latents, 2 UniPC flow-sigma steps with CFG. Text to video is diffusers' ``WanPipeline``; image to
video its ``WanImageToVideoPipeline`` of the same components (how the hub's TI2V-5B runs from an
image: the image's latents kept as the first latent frame, whose tokens get timestep 0). The
frames agree to 1e-3 on [0, 1] (measured 1.4e-6 from text, 1.3e-6 from an image).

The layout is the hub's Wan-AI/Wan2.2-TI2V-5B-Diffusers: a ``WanPipeline`` whose
``model_index.json`` says ``expand_timesteps``, the Wan 2.2 VAE (residual, 2x2 pixel patches)
and a transformer over the VAE's latent channels alone.
"""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from pipeline_cases import PROMPT
from wan_i2v_pipeline_cases import diffusers_i2v_frames, make_wan22_ti2v_pipeline, random_image

from mobius.testing import build_with_cli

FRAMES, HEIGHT, WIDTH = 5, 16, 32  # latents [1, 4, 2, 2, 4]: 1 x 2 patches a frame
LATENTS = (1, 4, 2, 2, 4)
OPTIONS = dict(
    num_inference_steps=2,
    num_frames=FRAMES,
    height=HEIGHT,
    width=WIDTH,
    negative_prompt="a blue bicycle",
    max_sequence_length=10,
)


def _image(seed: int = 5):
    return random_image(HEIGHT, WIDTH, seed)


@pytest.fixture(scope="module")
def ti2v(tmp_path_factory):
    """(diffusers WanPipeline, WanImageToVideoPipeline, built package directory)."""
    root = tmp_path_factory.mktemp("wan_ti2v")
    t2v, i2v = make_wan22_ti2v_pipeline(root / "hf")
    return t2v, i2v, build_with_cli(root / "hf", root / "onnx")


@pytest.mark.parametrize("mode", ["t2v", "i2v"])
def test_wan22_ti2v_matches_diffusers(ti2v, mode, monkeypatch):
    import onnx
    import torch

    from mobius_diffusion.pipeline import WanRunner, open_pipeline

    t2v, i2v, out = ti2v
    timestep = onnx.load(str(out / "transformer" / "model.onnx"), load_external_data=False)
    timestep = next(i for i in timestep.graph.input if i.name == "timestep")
    dims = [d.dim_param or d.dim_value for d in timestep.type.tensor_type.shape.dim]
    assert dims == ["batch", "video_tokens"]
    runner = open_pipeline(out)
    assert type(runner) is WanRunner and runner.expand_timesteps
    latents = np.random.default_rng(1).standard_normal(LATENTS).astype(np.float32)
    if mode == "t2v":
        with torch.no_grad():
            expected = t2v(
                PROMPT, latents=torch.from_numpy(latents), output_type="np", **OPTIONS
            ).frames
        got = runner(PROMPT, latents=latents, **OPTIONS)
    else:
        expected = diffusers_i2v_frames(i2v, _image(), latents, OPTIONS, monkeypatch)
        got = runner(PROMPT, image=_image(), latents=latents, **OPTIONS)
    assert got.shape == expected.shape == (1, FRAMES, HEIGHT, WIDTH, 3)
    assert float(expected.std()) > 1e-3, "the video barely depends on anything"
    diff = float(np.abs(got - expected).max())
    print(f"wan 2.2 ti2v {mode} max abs diff", diff)
    assert diff <= 1e-3


def test_ti2v_saved_as_image_to_video(ti2v, tmp_path):
    """A TI2V package whose index names ``WanImageToVideoPipeline`` (saved from that class) runs
    the same video; it needs the image and takes no last frame."""
    from mobius.errors import ConfigError
    from mobius_diffusion.pipeline import WanImageToVideoRunner, open_pipeline

    _, _, out = ti2v
    copy = tmp_path / "i2v"
    shutil.copytree(out, copy)
    index = json.loads((copy / "model_index.json").read_text())
    index["_class_name"] = "WanImageToVideoPipeline"
    (copy / "model_index.json").write_text(json.dumps(index))
    runner = open_pipeline(copy)
    assert isinstance(runner, WanImageToVideoRunner)
    latents = np.random.default_rng(1).standard_normal(LATENTS).astype(np.float32)
    got = runner(PROMPT, _image(), latents=latents, **OPTIONS)
    assert np.array_equal(
        got, open_pipeline(out)(PROMPT, image=_image(), latents=latents, **OPTIONS)
    )
    with pytest.raises(ConfigError, match="other Wan image-to-video models take none"):
        runner(PROMPT, _image(), last_image=_image(6), latents=latents, **OPTIONS)


def test_generate_cli_with_and_without_image(ti2v, tmp_path, capsys):
    from PIL import Image

    from mobius.cli import main

    _, _, out = ti2v
    image, clip = tmp_path / "first.png", tmp_path / "clip.webp"
    _image().save(image)
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3"]
    args += ["--height", str(HEIGHT), "--width", str(WIDTH), "--frames", str(FRAMES)]
    for extra in ([], ["--image", str(image)]):
        assert main([*args, *extra, "--output", str(clip)]) == 0
        with Image.open(clip) as video:
            assert (video.format, video.n_frames, video.size) == ("WEBP", FRAMES, (WIDTH, HEIGHT))
    capsys.readouterr()
    assert main([*args, "--image", str(image), "--last-image", str(image)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("mobius: error: a WanPipeline package takes no --last-image"), err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(expand_timesteps="yes"), "model_index.json expand_timesteps is 'yes'"),
        (dict(transformer_patch=[1, 4, 4]), "laid out for [1, 2, 2] patches"),
        (dict(expand_timesteps=False), "a Wan text-to-video package starts from no image"),
        (
            dict(boundary_ratio=0.875, transformer_2=["diffusers", "WanTransformer3DModel"]),
            "both expand_timesteps (Wan 2.2 TI2V) and two experts",
        ),
    ],
    ids=["not-a-boolean", "patches", "image-without-expand", "two-experts"],
)
def test_ti2v_refuses_what_it_does_not_run(ti2v, tmp_path, change, message):
    from mobius.errors import ConfigError
    from mobius_diffusion.pipeline import open_pipeline

    copy = tmp_path / "bad"
    shutil.copytree(ti2v[2], copy, ignore=shutil.ignore_patterns("*.onnx*", "*.data"))
    patch = change.pop("transformer_patch", None)
    if patch is not None:
        config = json.loads((copy / "transformer" / "config.json").read_text())
        config["patch_size"] = patch
        (copy / "transformer" / "config.json").write_text(json.dumps(config))
    index = json.loads((copy / "model_index.json").read_text())
    (copy / "model_index.json").write_text(json.dumps({**index, **change}))
    with pytest.raises(ConfigError, match=re.escape(message)):
        open_pipeline(copy)(PROMPT, image=_image(), **OPTIONS)
