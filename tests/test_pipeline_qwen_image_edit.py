"""A tiny random Qwen-Image Edit pipeline: built whole with ``mobius build`` (its Qwen2.5-VL text
encoder as mobius-vision's image-text encoder: vision tower, merged image tokens, the M-RoPE
decoder; the transformer, the causal VAE's encoder and decoder), run by mobius's numpy runner
and by diffusers from the same packed latents, 2 flow-matching steps; the images agree to 1e-3
on [0, 1] (measured ~8e-7), the text encoder's states to 1e-4 (measured ~9e-7; ~2e-2 with
the image tokens at text positions).

Every parameter is perturbed. The edit image (60x40) goes through diffusers'
``calculate_dimensions`` to a 96x64 image (VAE latents beside the noise's, the processor's
12 image tokens in the prompt); the 64 template tokens are dropped. Cases: true CFG with a
longer negative prompt at the image's size, and no guidance at another output size with two
prompts (diffusers' processor takes one image per batch, so each row is checked against its
own diffusers run).

Two adjustments of the reference, said here: diffusers fixes the edit image's area at
1024 x 1024, which makes the tiny pipeline's VAE and attention slow, so both sides take
:data:`AREA` (the runner's ``image_area``; diffusers' ``calculate_dimensions`` wrapped);
and diffusers 0.42 does not pass the processor's ``mm_token_type_ids`` to the text
encoder (huggingface/diffusers#14194), without which transformers 5 gives the image
tokens text positions, so the reference's text encoder gets them as the fix does.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from pipeline_cases import PROMPT
from qwen_image_edit_pipeline_cases import make_qwen_image_edit_pipeline

from mobius.errors import ConfigError
from mobius.testing import build_with_cli

AREA = 96 * 64  # a 3:2 image becomes 96 x 64 (diffusers: ~1024 x 1024)
EDIT = "make it blue"


def _edit_image():
    from PIL import Image

    rng = np.random.default_rng(5)
    ramp = np.linspace(0, 255, 60)[None, :, None] * np.ones((40, 1, 3))
    pixels = np.clip(ramp + rng.normal(0, 40, (40, 60, 3)), 0, 255).astype(np.uint8)
    return Image.fromarray(pixels)


def _with_token_types(text_encoder) -> None:
    """The reference text encoder given ``mm_token_type_ids`` (the image tokens), as
    huggingface/diffusers#14189 passes them."""
    forward, image_token = text_encoder.forward, text_encoder.config.image_token_id

    def typed(input_ids=None, **kwargs):
        kwargs.setdefault("mm_token_type_ids", (input_ids == image_token).long())
        return forward(input_ids=input_ids, **kwargs)

    text_encoder.forward = typed


@pytest.fixture(scope="module")
def qwen_image_edit(tmp_path_factory):
    """(diffusers pipeline, built package directory, the edit image's file)."""
    root = tmp_path_factory.mktemp("qwen-image-edit")
    pipe = make_qwen_image_edit_pipeline(root / "hf")
    _with_token_types(pipe.text_encoder)
    image = root / "in.png"
    _edit_image().save(image)
    return pipe, build_with_cli(root / "hf", root / "onnx"), image


@pytest.fixture
def small_area(monkeypatch):
    """diffusers' edit pipeline and mobius's runner both resize the edit image to :data:`AREA`."""
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit as edit

    from mobius_diffusion.pipelines.qwen_image_edit import QwenImageEditRunner

    original = edit.calculate_dimensions
    monkeypatch.setattr(edit, "calculate_dimensions", lambda area, ratio: original(AREA, ratio))
    monkeypatch.setattr(QwenImageEditRunner, "image_area", AREA)


def test_qwen_image_edit_builds_whole_and_matches_diffusers(qwen_image_edit, small_area):
    import torch
    from PIL import Image

    from mobius_diffusion.pipeline import QwenImageEditRunner, open_pipeline, pack_latents

    pipe, out, image_file = qwen_image_edit
    record = json.loads((out / "mobius.json").read_text())
    built = {m["graphs"][0]: (m["model_type"], m["task"]) for m in record["models"]}
    assert built["text_encoder/model"] == ("Qwen2_5_VLModel", "image-text-encoder")
    assert built["transformer/model"][0] == "QwenImageTransformer2DModel"
    runner = open_pipeline(out)
    assert isinstance(runner, QwenImageEditRunner)
    image = Image.open(image_file).convert("RGB")

    # the text encoder's states over the template, the instruction and the resized image
    resized = image.resize((96, 64), resample=Image.LANCZOS)
    states, _ = runner.encode_with_image([PROMPT], resized)
    with torch.no_grad():
        expected_states = pipe.encode_prompt(PROMPT, image=resized)[0].numpy()
    assert states.shape == expected_states.shape and states.shape[1] > 12  # 12 image tokens
    print("qwen-image edit text states max abs diff", np.abs(states - expected_states).max())
    assert np.abs(states - expected_states).max() <= 1e-4 * max(1, np.abs(states).max())

    noise = np.random.default_rng(1).standard_normal((2, 4, 16, 24)).astype(np.float32)
    guided = dict(negative_prompt="a blue bicycle on the moon", true_cfg_scale=4.0)
    small = dict(height=32, width=48)  # the output's size, not the edit image's
    cases = [  # (prompts, packed latents, options)
        ([PROMPT], pack_latents(noise[:1]), guided),
        ([EDIT, PROMPT], pack_latents(noise[:, :, :8, :12]), small),
    ]
    images = []
    for prompts, start, options in cases:
        got = runner(prompts, image=image, latents=start, num_inference_steps=2, **options)
        for row, prompt in enumerate(prompts):
            with torch.no_grad():
                expected = pipe(
                    image,
                    prompt,
                    latents=torch.from_numpy(start[row : row + 1]),
                    num_inference_steps=2,
                    output_type="np",
                    **options,
                ).images
            assert got[row : row + 1].shape == expected.shape
            assert float(expected.std()) > 1e-3, "the image barely depends on anything"
            diff = float(np.abs(got[row] - expected[0]).max())
            print("qwen-image edit", prompt, options, "max abs diff", diff)
            assert diff <= 1e-3
        images.append(got)
    assert images[0].shape == (1, 64, 96, 3) and images[1].shape == (2, 32, 48, 3)
    # the image is read: another image, another edit
    other = runner(
        [PROMPT], image=image.rotate(180), latents=cases[0][1], num_inference_steps=2, **guided
    )
    assert float(np.abs(other - images[0]).max()) > 1e-3


def test_generate_cli_edits_the_image(qwen_image_edit, small_area, tmp_path):
    from PIL import Image

    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline, to_pil

    _, out, image_file = qwen_image_edit
    edited = tmp_path / "edited.png"
    args = ["generate", str(out), EDIT, "--image", str(image_file), "--steps", "2"]
    assert main([*args, "--seed", "3", "--output", str(edited)]) == 0
    expected = open_pipeline(out)(EDIT, image=image_file, num_inference_steps=2, seed=3)
    got = np.asarray(Image.open(edited))
    assert got.shape == (64, 96, 3)
    assert np.array_equal(got, np.asarray(to_pil(expected)[0]))


def test_qwen_image_edit_refusals(qwen_image_edit, small_area, capsys):
    from mobius.cli import main
    from mobius_diffusion.pipeline import open_pipeline

    _, out, image_file = qwen_image_edit
    cases = [
        ([], "a QwenImageEditPipeline package starts from an image: give --image FILE"),
        (
            ["--image", str(image_file), "--height", "30", "--width", "24"],
            "height and width are multiples of 8, not 30 x 24",
        ),
    ]
    for extra, message in cases:
        assert main(["generate", str(out), EDIT, "--steps", "1", *extra]) == 1
        err = capsys.readouterr().err
        assert message in err, err
        assert len(err.strip().splitlines()) == 1
    with pytest.raises(ConfigError, match="true_cfg_scale or guidance_scale"):
        open_pipeline(out)(EDIT, image=image_file, true_cfg_scale=2.0, guidance_scale=2.0)
