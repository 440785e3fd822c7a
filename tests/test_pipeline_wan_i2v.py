"""Tiny random Wan image-to-video pipelines: built whole with ``mobius build``, run by mobius's
numpy runner and by diffusers from the same image and latents, 2 UniPC flow-sigma steps with
CFG; the frames agree to 1e-3 on [0, 1] (measured 4.1e-6 for Wan 2.1, 1.7e-6 for
Wan 2.2).

Wan 2.1 (:func:`make_wan21_i2v_pipeline`): the CLIP vision image encoder's
``hidden_states[-2]`` (mobius-vision's ``penultimate_hidden_state``) feed the transformer's
image keys and values; its text is 512 tokens, where diffusers cuts image from text. Wan 2.2
A14B (:func:`make_wan22_i2v_pipeline`): no image encoder, two experts, the first step (t 999)
at or above ``boundary_ratio`` (875) on ``transformer`` and the second (t 750) below it on
``transformer_2``, each with its own guidance scale. Both condition on the VAE-encoded first
frame beside its mask.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from pipeline_cases import PROMPT
from wan_i2v_pipeline_cases import make_wan21_i2v_pipeline, make_wan22_i2v_pipeline

from mobius.testing import build_with_cli

FRAMES, HEIGHT, WIDTH = 5, 16, 32  # latents [1, 4, 2, 4, 8]: 2 x 4 patches a frame
OPTIONS = dict(num_inference_steps=2, num_frames=FRAMES, height=HEIGHT, width=WIDTH)


def _image():
    """A 32 x 16 picture: the video's size (no resampling before the VAE) and, with its
    shortest edge the CLIP tower's 16, only centre-cropped for CLIP."""
    from PIL import Image

    rng = np.random.default_rng(5)
    return Image.fromarray(rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8))


@pytest.fixture(scope="module")
def wan_i2v(tmp_path_factory):
    """{version: (diffusers pipeline, built package directory)}."""
    root = tmp_path_factory.mktemp("wan_i2v")
    built = {}
    for version, make in (("2.1", make_wan21_i2v_pipeline), ("2.2", make_wan22_i2v_pipeline)):
        pipe = make(root / f"hf-{version}")
        built[version] = pipe, build_with_cli(root / f"hf-{version}", root / f"onnx-{version}")
    return built


@pytest.mark.parametrize(
    ("version", "options"),
    [
        ("2.1", dict(max_sequence_length=512, guidance_scale=5.0)),
        ("2.2", dict(max_sequence_length=10, guidance_scale=4.0, guidance_scale_2=2.0)),
    ],
)
def test_wan_i2v_builds_whole_and_matches_diffusers(wan_i2v, version, options, monkeypatch):
    import types

    import torch
    from diffusers.pipelines.wan import pipeline_wan_i2v

    from mobius_diffusion.pipeline import WanImageToVideoRunner, open_pipeline

    pipe, out = wan_i2v[version]
    record = json.loads((out / "mobius.json").read_text())
    built = {graph: m["model_type"] for m in record["models"] for graph in m["graphs"]}
    experts = {"2.1": ["transformer"], "2.2": ["transformer", "transformer_2"]}[version]
    for expert in experts:
        assert built[f"{expert}/model"] == "WanTransformer3DModel"
    assert ("image_encoder/model" in built) == (version == "2.1")
    runner = open_pipeline(out)
    assert isinstance(runner, WanImageToVideoRunner)

    image = _image()
    latents = np.random.default_rng(1).standard_normal((1, 4, 2, 4, 8)).astype(np.float32)
    options = dict(OPTIONS, negative_prompt="a blue bicycle", **options)
    # diffusers' I2V prompt cleaning calls ftfy even where it is not installed (its T2V
    # pipeline checks); ftfy leaves this plain ASCII prompt as it is, as mobius's cleaning does
    if not hasattr(pipeline_wan_i2v, "ftfy"):
        monkeypatch.setattr(
            pipeline_wan_i2v, "ftfy", types.SimpleNamespace(fix_text=str), raising=False
        )
    with torch.no_grad():
        expected = pipe(
            image, PROMPT, latents=torch.from_numpy(latents), output_type="np", **options
        ).frames
    got = runner(PROMPT, image, latents=latents, **options)
    assert got.shape == expected.shape == (1, FRAMES, HEIGHT, WIDTH, 3)
    assert float(expected.std()) > 1e-3, "the video barely depends on anything"
    diff = float(np.abs(got - expected).max())
    print(f"wan {version} i2v max abs diff", diff)
    assert diff <= 1e-3


def test_generate_cli_writes_the_video(wan_i2v, tmp_path, capsys):
    from PIL import Image

    from mobius.cli import main

    _, out = wan_i2v["2.2"]
    image, clip = tmp_path / "first.png", tmp_path / "clip.webp"
    _image().save(image)
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--image", str(image)]
    args += ["--height", str(HEIGHT), "--width", str(WIDTH), "--frames", str(FRAMES)]
    assert main([*args, "--output", str(clip)]) == 0
    with Image.open(clip) as video:
        assert (video.format, video.n_frames, video.size) == ("WEBP", FRAMES, (WIDTH, HEIGHT))
    capsys.readouterr()
    assert main([*args[:7], *args[9:], "--output", str(clip)]) == 1  # no --image
    err = capsys.readouterr().err
    assert err.startswith("mobius: error: a WanImageToVideoPipeline package starts from an image")


def test_wan21_i2v_refuses_a_short_text(wan_i2v):
    from mobius.errors import ConfigError
    from mobius_diffusion.pipeline import open_pipeline

    runner = open_pipeline(wan_i2v["2.1"][1])
    with pytest.raises(ConfigError, match="reads 512 text tokens, not 10"):
        runner(PROMPT, _image(), max_sequence_length=10, **OPTIONS)
