"""Tiny random Wan image-to-video pipelines: built whole with ``mobius build``, run by mobius's
numpy runner and by diffusers from the same image and latents, 2 UniPC flow-sigma steps with
CFG; the frames agree to 1e-3 on [0, 1] (measured 4.1e-6 for Wan 2.1, 1.7e-6 for
Wan 2.2, 5.9e-6 for Wan 2.1 FLF2V, 2.1e-6 for Wan 2.2 from a first and a last frame).

Wan 2.1 (:func:`make_wan21_i2v_pipeline`): the CLIP vision image encoder's
``hidden_states[-2]`` (mobius-vision's ``penultimate_hidden_state``) feed the transformer's
image keys and values; its text is 512 tokens, where diffusers cuts image from text. Wan 2.2
A14B (:func:`make_wan22_i2v_pipeline`): no image encoder, two experts, the first step (t 999)
at or above ``boundary_ratio`` (875) on ``transformer`` and the second (t 750) below it on
``transformer_2``, each with its own guidance scale. Both condition on the VAE-encoded first
frame beside its mask. Wan 2.1 FLF2V (``make_wan21_i2v_pipeline(first_last=True)``) also
ends on a last frame: encoded as the video's last, set in the mask, and its CLIP states joined
to the first's under the transformer's ``pos_embed``; Wan 2.2 A14B takes a last frame too.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from pipeline_cases import PROMPT
from wan_i2v_pipeline_cases import (
    diffusers_i2v_frames,
    make_wan21_i2v_pipeline,
    make_wan22_i2v_pipeline,
    random_image,
)

from mobius.testing import build_with_cli

FRAMES, HEIGHT, WIDTH = 5, 16, 32  # latents [1, 4, 2, 4, 8]: 2 x 4 patches a frame
OPTIONS = dict(num_inference_steps=2, num_frames=FRAMES, height=HEIGHT, width=WIDTH)


def _image(seed: int = 5):
    """A 32 x 16 picture: the video's size (no resampling before the VAE) and, with its
    shortest edge the CLIP tower's 16, only centre-cropped for CLIP."""
    return random_image(HEIGHT, WIDTH, seed)


@pytest.fixture(scope="module")
def wan_i2v(tmp_path_factory):
    """{version: (diffusers pipeline, built package directory)}."""
    root = tmp_path_factory.mktemp("wan_i2v")
    built = {}
    makers = {
        "2.1": make_wan21_i2v_pipeline,
        "2.2": make_wan22_i2v_pipeline,
        "flf2v": lambda directory: make_wan21_i2v_pipeline(directory, first_last=True),
    }
    for version, make in makers.items():
        pipe = make(root / f"hf-{version}")
        built[version] = pipe, build_with_cli(root / f"hf-{version}", root / f"onnx-{version}")
    return built


@pytest.mark.parametrize(
    ("version", "options", "last"),
    [
        ("2.1", dict(max_sequence_length=512, guidance_scale=5.0), False),
        ("2.2", dict(max_sequence_length=10, guidance_scale=4.0, guidance_scale_2=2.0), False),
        ("flf2v", dict(max_sequence_length=512, guidance_scale=5.0), True),
        ("2.2", dict(max_sequence_length=10, guidance_scale=4.0), True),
    ],
)
def test_wan_i2v_builds_whole_and_matches_diffusers(wan_i2v, version, options, last, monkeypatch):
    from mobius_diffusion.pipeline import WanImageToVideoRunner, open_pipeline

    pipe, out = wan_i2v[version]
    record = json.loads((out / "mobius.json").read_text())
    built = {graph: m["model_type"] for m in record["models"] for graph in m["graphs"]}
    experts = ["transformer", "transformer_2"] if version == "2.2" else ["transformer"]
    for expert in experts:
        assert built[f"{expert}/model"] == "WanTransformer3DModel"
    assert ("image_encoder/model" in built) == (version != "2.2")
    runner = open_pipeline(out)
    assert isinstance(runner, WanImageToVideoRunner)

    image, images = _image(), {"last_image": _image(6)} if last else {}
    latents = np.random.default_rng(1).standard_normal((1, 4, 2, 4, 8)).astype(np.float32)
    options = dict(OPTIONS, negative_prompt="a blue bicycle", **options)
    expected = diffusers_i2v_frames(pipe, image, latents, options, monkeypatch, **images)
    got = runner(PROMPT, image, latents=latents, **options, **images)
    assert got.shape == expected.shape == (1, FRAMES, HEIGHT, WIDTH, 3)
    assert float(expected.std()) > 1e-3, "the video barely depends on anything"
    diff = float(np.abs(got - expected).max())
    print(f"wan {version} i2v (last frame: {last}) max abs diff", diff)
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
    for version, extra, message in (
        ("flf2v", [], "a WanImageToVideoPipeline package ends on a last frame: give --last-image"),
        ("2.1", ["--last-image", str(image)], "a WanImageToVideoPipeline package takes no --last"),
    ):
        args[1] = str(wan_i2v[version][1])
        assert main([*args, *extra, "--output", str(clip)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"mobius: error: {message}"), err
        assert len(err.splitlines()) == 1


def test_wan21_i2v_refuses_a_short_text(wan_i2v):
    from mobius.errors import ConfigError
    from mobius_diffusion.pipeline import open_pipeline

    runner = open_pipeline(wan_i2v["2.1"][1])
    with pytest.raises(ConfigError, match="reads 512 text tokens, not 10"):
        runner(PROMPT, _image(), max_sequence_length=10, **OPTIONS)


@pytest.mark.parametrize(
    ("version", "images"), [("flf2v", {}), ("2.1", {"last_image": "last"})], ids=["no-last", "2.1"]
)
def test_wan_i2v_last_image_is_asked_for_or_refused(wan_i2v, version, images):
    """A FLF2V transformer needs the last frame; Wan 2.1's plain I2V one takes none (diffusers'
    fails on its two images' states)."""
    from mobius.errors import ConfigError
    from mobius_diffusion.pipeline import open_pipeline

    runner = open_pipeline(wan_i2v[version][1])
    images = {name: _image(6) for name in images}
    with pytest.raises(ConfigError, match=r"\(FLF2V: pos_embed_seq_len\) needs a last_image"):
        runner(PROMPT, _image(), max_sequence_length=512, **OPTIONS, **images)
