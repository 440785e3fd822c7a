"""A tiny random Flux.2 Klein pipeline: built whole with ``mobius build`` (its Qwen3 text encoder
through mobius-text's text-encoder task with layers 9, 18 and 27, the Flux.2 transformer, the
VAE with its batch-norm statistics), run by mobius's numpy runner and by diffusers from the same
latents, 2 flow-matching steps; the images agree to 1e-3 on [0, 1] (measured ~1e-6).

Every parameter is perturbed. The prompt goes through the chat template (thinking off) and is
padded on the right to the sequence length with a mask; guidance runs the empty prompt too
(CFG), or not at all on a step-distilled package; two prompts of two lengths are batched; the
VAE's batch-norm statistics are far from 0 and 1: each changes the image if mishandled.
FLUX.2 dev (``Flux2Pipeline``) is built and run the same way, its Mistral 3 text encoder
through mobius-text's ``Mistral3TextModel`` with layers 10, 20 and 30.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from flux2_pipeline_cases import make_flux2_klein_pipeline, make_flux2_pipeline
from pipeline_cases import PROMPT

from mobius.errors import ConfigError
from mobius.testing import build_with_cli

HEIGHT, WIDTH = 16, 24  # the VAE's factor 2 and 2x2 patches: a 4 x 6 token grid
OPTIONS = dict(num_inference_steps=2, height=HEIGHT, width=WIDTH, max_sequence_length=24)


@pytest.fixture(scope="module")
def klein(tmp_path_factory):
    """(diffusers pipeline, built package directory)."""
    root = tmp_path_factory.mktemp("flux2-klein")
    pipe = make_flux2_klein_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def test_flux2_klein_builds_whole_and_matches_diffusers(klein):
    import torch

    from mobius_diffusion.pipeline import Flux2KleinRunner, open_pipeline

    pipe, out = klein
    record = json.loads((out / "mobius.json").read_text())
    built = {g: m["model_type"] for m in record["models"] for g in m["graphs"]}
    assert built["text_encoder/model"] == "Qwen3Model"
    assert built["transformer/model"] == "Flux2Transformer2DModel"
    assert built["vae/bn/model"] == "AutoencoderKLFlux2"
    runner = open_pipeline(out)
    assert isinstance(runner, Flux2KleinRunner)

    latents = np.random.default_rng(1).standard_normal((2, 16, 4, 6)).astype(np.float32)
    # one prompt with CFG on the empty prompt; two prompts of two lengths, unguided
    cases = [([PROMPT], latents[:1], 4.0), ([PROMPT, "a cat"], latents, 1.0)]
    images = []
    for prompts, start, scale in cases:
        options = dict(OPTIONS, guidance_scale=scale)
        with torch.no_grad():
            expected = pipe(
                prompt=prompts, latents=torch.from_numpy(start), output_type="np", **options
            ).images
        got = runner(prompts, latents=start, **options)
        assert got.shape == expected.shape == (len(prompts), HEIGHT, WIDTH, 3)
        assert float(expected.std()) > 1e-3, "the image barely depends on anything"
        diff = float(np.abs(got - expected).max())
        print("flux2-klein", len(prompts), "prompts, max abs diff", diff)
        assert diff <= 1e-3
        images.append(got)
    # guidance is applied: unguided, another image
    assert float(np.abs(images[0][0] - images[1][0]).max()) > 1e-3
    # a step-distilled package runs no CFG whatever the scale
    runner.index["is_distilled"] = True
    distilled = runner(PROMPT, latents=latents[:1], **dict(OPTIONS, guidance_scale=4.0))
    assert np.array_equal(
        distilled, runner(PROMPT, latents=latents[:1], **dict(OPTIONS, guidance_scale=1.0))
    )


def test_generate_cli_writes_the_flux2_klein_image(klein, tmp_path, capsys):
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out = klein
    image = tmp_path / "image.png"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(image)]
    assert main([*args, "--height", str(HEIGHT), "--width", str(WIDTH)]) == 0
    runner = open_pipeline(out)
    expected = runner(PROMPT, num_inference_steps=2, seed=3, height=HEIGHT, width=WIDTH)
    assert np.array_equal(np.asarray(Image.open(image)), np.asarray(to_pil(expected)[0]))
    # a size it would round down, and a negative prompt it takes none of, are refused
    assert main([*args, "--height", "18", "--width", str(WIDTH)]) == 1
    assert main([*args, "--negative-prompt", "blue"]) == 1
    err = capsys.readouterr().err
    assert "multiples of 4, not 18 x 24" in err and "takes no negative prompt" in err, err
    with pytest.raises(ConfigError, match="latents of shape"):
        runner(PROMPT, latents=np.zeros((1, 16, 2, 2), np.float32), height=HEIGHT, width=WIDTH)


@pytest.fixture(scope="module")
def flux2(tmp_path_factory):
    """(diffusers ``Flux2Pipeline``, built package directory)."""
    root = tmp_path_factory.mktemp("flux2")
    pipe = make_flux2_pipeline(root / "hf")
    return pipe, build_with_cli(root / "hf", root / "onnx")


def test_flux2_builds_whole_and_matches_diffusers(flux2, tmp_path):
    """FLUX.2 dev: the Mistral 3 text encoder (layers 10, 20 and 30, its vision tower left
    out) behind the system turn, the guidance embedding; equal to diffusers within 1e-3
    (measured ~1e-6).

    The processor's tokenizer adds ``<s>`` and the template writes one (a second would move
    every state); one prompt holds ``[IMG]``, which diffusers removes: the prompt states are
    compared too (<= 1e-4; measured ~2e-7). Two prompts of two lengths are padded; a second
    guidance scale gives another image (no CFG: one pass)."""
    import torch
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import Flux2Runner, open_pipeline, to_pil

    pipe, out = flux2
    record = json.loads((out / "mobius.json").read_text())
    built = {g: m["model_type"] for m in record["models"] for g in m["graphs"]}
    assert built["text_encoder/model"] == "Mistral3TextModel"
    assert built["transformer/model"] == "Flux2Transformer2DModel"
    runner = open_pipeline(out)
    assert isinstance(runner, Flux2Runner)
    assert "guidance" in runner.graph_inputs("transformer/model")

    options = dict(OPTIONS, max_sequence_length=40)  # the system turn is 34 tokens
    prompts = [PROMPT, "a [IMG]cat"]
    with torch.no_grad():  # the prompt states alone: one token amiss moves them far
        embeds, _ = pipe.encode_prompt(prompts, max_sequence_length=40)
    assert float(np.abs(runner.encode(prompts, 40) - embeds.numpy()).max()) <= 1e-4
    latents = np.random.default_rng(1).standard_normal((2, 16, 4, 6)).astype(np.float32)
    cases = [([PROMPT], latents[:1], 4.0), (prompts, latents, 2.5)]
    images = []
    for prompts, start, scale in cases:
        call = dict(options, guidance_scale=scale)
        with torch.no_grad():
            expected = pipe(
                prompt=prompts, latents=torch.from_numpy(start), output_type="np", **call
            ).images
        got = runner(prompts, latents=start, **call)
        assert got.shape == expected.shape == (len(prompts), HEIGHT, WIDTH, 3)
        assert float(expected.std()) > 1e-3, "the image barely depends on anything"
        diff = float(np.abs(got - expected).max())
        print("flux2", len(prompts), "prompts, max abs diff", diff)
        assert diff <= 1e-3
        images.append(got)
    assert float(np.abs(images[0][0] - images[1][0]).max()) > 1e-3  # the guidance embedding

    image = tmp_path / "image.png"
    args = ["generate", str(out), PROMPT, "--steps", "2", "--seed", "3", "--output", str(image)]
    assert main([*args, "--height", str(HEIGHT), "--width", str(WIDTH)]) == 0
    expected = runner(PROMPT, num_inference_steps=2, seed=3, height=HEIGHT, width=WIDTH)
    assert np.array_equal(np.asarray(Image.open(image)), np.asarray(to_pil(expected)[0]))


def test_a_malformed_chat_template_is_refused_in_one_line(flux2, tmp_path):
    """The processor's chat template is a stranger's file: one that is not UTF-8 text, or a
    ``chat_template.json`` without a string, is a ConfigError naming it, not a traceback."""
    import shutil

    from mobius.errors import ConfigError
    from mobius_diffusion.pipeline import open_pipeline

    package = shutil.copytree(flux2[1], tmp_path / "package")
    folder = package / "tokenizer"
    for name in ("chat_template.jinja", "chat_template.json"):
        (folder / name).unlink(missing_ok=True)
    (folder / "chat_template.json").write_text('{"chat_template": ["not", "text"]}')
    with pytest.raises(ConfigError, match="chat_template.json has no chat_template string"):
        open_pipeline(package).chat_template()
    (folder / "chat_template.jinja").write_bytes(b"\xff\xfe{{ bad }}")
    with pytest.raises(ConfigError, match="chat_template.jinja is not UTF-8 text"):
        open_pipeline(package).chat_template()
