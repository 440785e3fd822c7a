"""Tiny random Lumina 2 and CogView4 pipelines: built whole with ``mobius build`` (their Gemma 2 /
GLM text encoders through mobius-text's text-encoder task, with ``hidden_states[-2]``), run by
mobius's numpy runners and by diffusers from the same latents, 2 or 3 flow-matching steps with CFG;
the images agree to 1e-3 (measured figures at each comparison).

Every parameter is perturbed. Lumina 2: the prompt behind the system prompt, padded on the
right (the mask matters: Gemma 2's sliding window is shorter than the text); guidance
renormalized on the first step and truncated on the second (``cfg_trunc_ratio`` 0.5); a
VAE shift factor. CogView4: left padding and left pad ids to a multiple of 16, negative
and positive prompts of different lengths, size conditioning (``original_size``, crop)
that differs from the image's, the image-size-dependent time shift.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from lumina2_cogview4_pipeline_cases import make_cogview4_pipeline, make_lumina2_pipeline
from pipeline_cases import PROMPT

from mobius.errors import ConfigError
from mobius.testing import build_with_cli

#: Lumina 2: latents 2 * (size // 16) (diffusers' fixed factor 8): 4 x 6, 2 x 3 patches.
#: CogView4: VAE factor 2: latents 16 x 24, 8 x 12 patches of 2.
HEIGHT, WIDTH = 32, 48
COGVIEW4_HEIGHT, COGVIEW4_WIDTH = 32, 48
LONG_NEGATIVE = "the blue bicycle on the moon " * 3  # 20 tokens: padded to 32, the prompt to 16


@pytest.fixture(scope="module")
def lumina2(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("lumina2")
    pipe = make_lumina2_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


@pytest.fixture(scope="module")
def cogview4(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("cogview4")
    pipe = make_cogview4_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def _built(out) -> dict:
    record = json.loads((out / "mobius.json").read_text())
    return {m["graphs"][0]: m["model_type"] for m in record["models"]}


def _compare(name, got, expected, shape):
    assert got.shape == expected.shape == shape
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"
    diff = float(np.abs(got - expected).max())
    print(name, "max abs diff", diff)
    assert diff <= 1e-3


def test_lumina2_builds_whole_and_matches_diffusers(lumina2):
    """Measured ~1.4e-6."""
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = lumina2
    built = _built(out)
    assert built["text_encoder/model"] == "Gemma2Model"
    assert built["transformer/model"] == "Lumina2Transformer2DModel"
    latents = np.random.default_rng(1).standard_normal((1, 4, 4, 6)).astype(np.float32)
    options = dict(
        num_inference_steps=2,
        height=HEIGHT,
        width=WIDTH,
        guidance_scale=3.0,
        negative_prompt="a blue cat",
        cfg_trunc_ratio=0.5,  # guided (and renormalized) on step 1 only
        max_sequence_length=40,
    )
    with torch.no_grad():
        expected = pipe(
            PROMPT, latents=torch.from_numpy(latents), output_type="np", **options
        ).images
    runner = open_pipeline(out)
    got = runner(PROMPT, latents=latents, **options)
    _compare("lumina2", got, expected, (1, HEIGHT, WIDTH, 3))
    # the system prompt and the renormalization are read: dropping either changes the image
    for change in (dict(system_prompt="a"), dict(cfg_normalization=False)):
        other = runner(PROMPT, latents=latents, **{**options, **change})
        assert float(np.abs(other - got).max()) > 1e-3, change


def test_cogview4_builds_whole_and_matches_diffusers(cogview4):
    """Measured ~1.2e-6."""
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = cogview4
    built = _built(out)
    assert built["text_encoder/model"] == "GlmModel"
    assert built["transformer/model"] == "CogView4Transformer2DModel"
    latents = np.random.default_rng(1).standard_normal((1, 4, 16, 24)).astype(np.float32)
    options = dict(
        num_inference_steps=3,  # 2 would step 1000 -> 1: sigmas 1 and ~0, which no shift moves
        height=COGVIEW4_HEIGHT,
        width=COGVIEW4_WIDTH,
        guidance_scale=3.5,
        negative_prompt=LONG_NEGATIVE,
        original_size=(64, 48),
        crops_coords_top_left=(4, 8),
        max_sequence_length=64,
    )
    with torch.no_grad():
        expected = pipe(
            PROMPT, latents=torch.from_numpy(latents), output_type="np", **options
        ).images
    got = open_pipeline(out)(PROMPT, latents=latents, **options)
    _compare("cogview4", got, expected, (1, COGVIEW4_HEIGHT, COGVIEW4_WIDTH, 3))


@pytest.mark.parametrize(
    ("case", "size"),
    [("lumina2", (HEIGHT, WIDTH)), ("cogview4", (COGVIEW4_HEIGHT, COGVIEW4_WIDTH))],
)
def test_generate_cli_writes_the_image(request, tmp_path, case, size):
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out = request.getfixturevalue(case)
    height, width = size
    image = tmp_path / "image.png"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(image)]
    assert main([*args, "--height", str(height), "--width", str(width)]) == 0
    expected = open_pipeline(out)(PROMPT, num_inference_steps=2, seed=3, height=height, width=width)
    assert np.array_equal(np.asarray(Image.open(image)), np.asarray(to_pil(expected)[0]))


@pytest.mark.parametrize("case", ["lumina2", "cogview4"])
def test_refusals_are_one_line(request, tmp_path, capsys, case):
    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline

    _, out = request.getfixturevalue(case)
    args = ["generate", str(out), PROMPT, "--steps", "1", "--output", str(tmp_path / "x.png")]
    assert main([*args, "--height", "40", "--width", "32"]) == 1
    err = capsys.readouterr().err
    assert "is a multiple of 16 on each side, not 40 x 32" in err, err
    assert len(err.strip().splitlines()) == 1
    # a text encoder built without hidden_states[-2]: here, a config that says more layers
    package = tmp_path / "package"
    shutil.copytree(out, package)
    config_path = package / "text_encoder" / "config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "num_hidden_layers": 5}))
    with pytest.raises(ConfigError, match=r"no output hidden_states.4 \(hidden_states\[-2\]\)"):
        open_pipeline(package)(PROMPT, num_inference_steps=1, height=32, width=32)
