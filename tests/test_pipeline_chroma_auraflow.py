"""Tiny random Chroma and AuraFlow pipelines: built whole with ``mobius build``, run by mobius's
numpy runners and by diffusers from the same latents, 2 steps with CFG and a negative prompt;
the images agree to 1e-3 on [0, 1] (measured: Chroma 6.9e-7, AuraFlow 8.9e-7).

Every parameter is perturbed; see :mod:`chroma_auraflow_pipeline_cases` for the layouts. The
prompt (7 tokens) is shorter than ``max_sequence_length``, so the masks matter: Chroma's text
mask keeping one padding token moves the image by 1e-2 if it keeps none or all, so the image
check catches it. AuraFlow's tiny transformer hears its text faintly (zeroing the padded UMT5
states moves the image by only 7e-5), so its conditioning is also checked against diffusers'
``encode_prompt`` directly.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from chroma_auraflow_pipeline_cases import make_auraflow_pipeline, make_chroma_pipeline
from pipeline_cases import PROMPT

from mobius.testing import build_with_cli

HEIGHT, WIDTH = 32, 24  # latents 16 x 12 (a VAE factor of 2)
NEGATIVE = "a blue cat"
OPTIONS = dict(num_inference_steps=2, height=HEIGHT, width=WIDTH, max_sequence_length=10)
NOISE = np.random.default_rng(1).standard_normal((1, 4, 16, 12)).astype(np.float32)


@pytest.fixture(scope="module")
def chroma(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("chroma")
    pipe = make_chroma_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


@pytest.fixture(scope="module")
def auraflow(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("auraflow")
    pipe = make_auraflow_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def _built_models(out) -> dict[str, str]:
    """Each graph of the package's build record, with the class it was built as."""
    record = json.loads((out / "mobius.json").read_text())
    return {graph: m["model_type"] for m in record["models"] for graph in m["graphs"]}


def _image_diff(pipe, runner, latents, **options) -> tuple[float, np.ndarray]:
    """Max abs difference of mobius's and diffusers' images from ``latents``, and diffusers' image."""
    import torch

    with torch.no_grad():
        expected = pipe(
            PROMPT, latents=torch.from_numpy(latents), output_type="np", **options
        ).images
    got = runner(PROMPT, latents=latents, **options)
    assert got.shape == expected.shape == (1, HEIGHT, WIDTH, 3)
    assert float(expected.std()) > 1e-3, "the image barely depends on anything"
    return float(np.abs(got - expected).max()), expected


def test_chroma_builds_whole_and_matches_diffusers(chroma):
    from mobius_diffusion.pipeline import ChromaRunner, open_pipeline, pack_latents

    pipe, out = chroma
    assert _built_models(out) == {
        "text_encoder/model": "T5EncoderModel",
        "transformer/model": "ChromaTransformer2DModel",
        "vae/encoder/model": "AutoencoderKL",
        "vae/decoder/model": "AutoencoderKL",
    }
    runner = open_pipeline(out)
    assert isinstance(runner, ChromaRunner)
    latents = pack_latents(NOISE)
    guided = dict(OPTIONS, guidance_scale=3.0, negative_prompt=NEGATIVE)
    diff, expected = _image_diff(pipe, runner, latents, **guided)
    print("chroma max abs diff", diff)
    assert diff <= 1e-3
    diff, unguided = _image_diff(pipe, runner, latents, **OPTIONS, guidance_scale=1.0)
    print("chroma without guidance max abs diff", diff)
    assert diff <= 1e-3
    assert float(np.abs(unguided - expected).max()) > 1e-2  # the negative prompt is heard


def test_chroma_text_mask_matches_diffusers(chroma):
    """T5 states and the text mask (the prompt and one padding token) as diffusers' encode_prompt."""
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = chroma
    states, mask = open_pipeline(out).encode([PROMPT, ""], 10)
    with torch.no_grad():
        expected = pipe.encode_prompt(PROMPT, negative_prompt="", max_sequence_length=10)
    expected_states = torch.cat([expected[0], expected[3]]).numpy()
    expected_mask = torch.cat([expected[2], expected[5]]).numpy()
    assert mask.tolist() == expected_mask.tolist()
    assert mask.sum(axis=1).tolist() == [8, 2]  # 7 prompt tokens + 1; "" is </s> + 1
    np.testing.assert_allclose(states, expected_states, rtol=0, atol=1e-5)


def test_auraflow_builds_whole_and_matches_diffusers(auraflow):
    from mobius_diffusion.pipeline import AuraFlowRunner, open_pipeline

    pipe, out = auraflow
    assert _built_models(out) == {
        "text_encoder/model": "UMT5EncoderModel",
        "transformer/model": "AuraFlowTransformer2DModel",
        "vae/encoder/model": "AutoencoderKL",
        "vae/decoder/model": "AutoencoderKL",
    }
    runner = open_pipeline(out)
    assert isinstance(runner, AuraFlowRunner)
    guided = dict(OPTIONS, guidance_scale=3.0, negative_prompt=NEGATIVE)
    diff, _ = _image_diff(pipe, runner, NOISE, **guided)
    print("auraflow max abs diff", diff)
    assert diff <= 1e-3
    diff, _ = _image_diff(pipe, runner, NOISE, **OPTIONS, guidance_scale=1.0)
    print("auraflow without guidance max abs diff", diff)
    assert diff <= 1e-3


def test_auraflow_text_states_match_diffusers(auraflow):
    """UMT5 states zeroed past each text, as diffusers' encode_prompt gives them."""
    import torch

    from mobius_diffusion.pipeline import open_pipeline

    pipe, out = auraflow
    states = open_pipeline(out).encode([PROMPT, NEGATIVE], 10)
    with torch.no_grad():
        expected = pipe.encode_prompt(PROMPT, negative_prompt=NEGATIVE, max_sequence_length=10)
    expected_states = torch.cat([expected[0], expected[2]]).numpy()
    assert not states[0, 7:].any() and states[0, :7].all()  # 7 prompt tokens, 3 pads zeroed
    np.testing.assert_allclose(states, expected_states, rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["chroma", "auraflow"])
def test_generate_cli_writes_the_image(family, request, tmp_path, capsys):
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out = request.getfixturevalue(family)
    image = tmp_path / "image.png"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(image)]
    assert main([*args, "--height", str(HEIGHT), "--width", str(WIDTH)]) == 0
    expected = open_pipeline(out)(PROMPT, num_inference_steps=2, seed=3, height=HEIGHT, width=WIDTH)
    assert np.array_equal(np.asarray(Image.open(image)), np.asarray(to_pil(expected)[0]))
    capsys.readouterr()

    message = {
        "chroma": "a 2 x 32 image is smaller than one packed token (4 pixels a side)",
        "auraflow": "AuraFlow image sides are multiples of 4, not 32 x 2",
    }[family]
    assert main([*args, "--height", str(HEIGHT), "--width", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"mobius: error: {message}"), err
    assert len(err.splitlines()) == 1


def test_a_package_without_its_text_encoder_is_refused(chroma, tmp_path, capsys):
    from mobius.cli import main

    _, out = chroma
    broken = tmp_path / "no-t5"
    shutil.copytree(out, broken, ignore=shutil.ignore_patterns("text_encoder"))
    assert main(["generate", str(broken), PROMPT, "--steps", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"mobius: error: no text_encoder/model.onnx in {broken}"), err
    assert len(err.splitlines()) == 1
