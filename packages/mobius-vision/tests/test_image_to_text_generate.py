"""``mobius generate PKG "" --image FILE`` for image-to-text packages against transformers.

A tiny random TrOCR-shaped vision encoder–decoder and a tiny Pix2Struct (every
parameter perturbed) are saved with a word-level tokenizer and their image processors
(ViT's; Pix2Struct's PIL one), built once each with the CLI; then the runner's
torch-free encoder feeds equal the image processor's, ``mobius generate`` prints what
transformers' greedy ``generate`` decodes (TrOCR with and without a task prompt), and
bad input is a one-line error.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from test_image_to_text_parity import trocr, vision_encoder_decoder, vit

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import build_with_cli, tiny_tokenizer
from mobius_vision.image_to_text_runner import ImageToTextGenerator
from mobius_vision.testing import make_random_image_to_text

SPECIALS = {"<s>": 0, "</s>": 2}  # then <unk> 1, <pad> 3


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from transformers import ViTImageProcessorPil

    work = tmp_path_factory.mktemp("trocr")
    # An untied head: a tied one tends to repeat the start token (the end token too) at once.
    decoder = trocr(cross_attention_hidden_size=48, pad_token_id=3, tie_word_embeddings=False)
    config = vision_encoder_decoder(vit(48), decoder)
    model = make_random_image_to_text(config, seed=1)
    tokenizer = tiny_tokenizer(config.decoder.vocab_size, SPECIALS)
    image_processor = ViTImageProcessorPil(size={"height": 32, "width": 32})
    for part in (model, tokenizer, image_processor):
        part.save_pretrained(work / "hf")
    package = build_with_cli(work / "hf", work / "onnx")
    return model, tokenizer, image_processor, package


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 256, (45, 37, 3), dtype=np.uint8)
    path = tmp_path_factory.mktemp("images") / "line.png"
    Image.fromarray(pixels).save(path)
    return path


def transformers_text(built, image_file, prompt: str = "") -> str:
    from PIL import Image

    model, tokenizer, image_processor, _ = built
    pixels = image_processor(Image.open(image_file), return_tensors="pt").pixel_values
    start = [
        [
            model.config.decoder_start_token_id,
            *tokenizer(prompt, add_special_tokens=False).input_ids,
        ]
    ]
    with torch.no_grad():
        ids = model.generate(
            pixel_values=pixels, decoder_input_ids=torch.tensor(start), do_sample=False,
            max_new_tokens=8,
        )  # fmt: skip
    return tokenizer.decode(ids[0, len(start[0]) :], skip_special_tokens=True)


def cli_text(package, prompt: str, image, capsys) -> str:
    assert (
        main(["generate", str(package), prompt, "--image", str(image), "--max-new-tokens", "8"])
        == 0
    )
    out, err = capsys.readouterr()
    assert "new tokens" in err
    return out.removesuffix("\n")


def test_pixels_match_the_image_processor(built, image_file):
    from PIL import Image

    _, _, image_processor, package = built
    expected = image_processor(Image.open(image_file), return_tensors="np").pixel_values
    got = ImageToTextGenerator(package, image_file).encoder_feeds()["pixel_values"]
    assert got.shape == expected.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("prompt", ["", "w7 w9"])
def test_generate_prints_transformers_greedy_text(built, image_file, prompt, capsys):
    expected = transformers_text(built, image_file, prompt)
    assert expected  # the seed makes a few words, not an immediate end
    assert cli_text(built[3], prompt, image_file, capsys) == expected


def test_bad_input_is_a_one_line_error(built, image_file, tmp_path, capsys):
    package = str(built[3])

    def error(*args: str) -> str:
        assert main(["generate", package, "", *args]) != 0
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1, lines
        return lines[0]

    assert "reads one image: give --image FILE once (got 0)" in error()
    assert "(got 2)" in error("--image", str(image_file), "--image", str(image_file))
    missing = tmp_path / "no.png"
    assert f"no image file at {missing}" in error("--image", str(missing))
    text = tmp_path / "notes.png"
    text.write_text("not an image")
    assert f"cannot read {text} as an image" in error("--image", str(text))


# --- Pix2Struct: padded patch lists made without torch --------------------------------


@pytest.fixture(scope="module")
def built_pix2struct(tmp_path_factory):
    from test_image_to_text_parity import pix2struct
    from transformers import Pix2StructImageProcessorPil

    work = tmp_path_factory.mktemp("pix2struct")
    config = pix2struct()  # 4x4 patches of 3 channels: 48 values each
    model = make_random_image_to_text(config, seed=1)
    tokenizer = tiny_tokenizer(config.text_config.vocab_size, {"<start>": 0, "</s>": 1})
    image_processor = Pix2StructImageProcessorPil(
        patch_size={"height": 4, "width": 4}, max_patches=12
    )
    for part in (model, tokenizer, image_processor):
        part.save_pretrained(work / "hf")
    package = build_with_cli(work / "hf", work / "onnx")
    return model, tokenizer, image_processor, package


@pytest.mark.parametrize("size", [(45, 37), (5, 7)])  # shrunk to 12 patches; enlarged
def test_pix2struct_patches_match_the_image_processor(built_pix2struct, size, tmp_path):
    """Float antialiased resizing in numpy (float32 weights, as torch's interpolate)."""
    from PIL import Image

    _, _, image_processor, package = built_pix2struct
    path = tmp_path / "image.png"
    pixels = np.random.default_rng(2).integers(0, 256, (*size, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    expected = image_processor(Image.open(path), return_tensors="np")
    got = ImageToTextGenerator(package, path).encoder_feeds()
    np.testing.assert_allclose(
        got["flattened_patches"], expected["flattened_patches"], atol=1e-6, rtol=0
    )
    np.testing.assert_array_equal(got["attention_mask"], expected["attention_mask"])
    assert 0 < got["attention_mask"].sum() < got["attention_mask"].size  # some padding


def test_pix2struct_generate_prints_transformers_greedy_text(built_pix2struct, image_file, capsys):
    from PIL import Image

    model, tokenizer, image_processor, package = built_pix2struct
    inputs = image_processor(Image.open(image_file), return_tensors="pt")
    with torch.no_grad():
        ids = model.generate(**inputs, do_sample=False, max_new_tokens=8)
    expected = tokenizer.decode(ids[0, 1:], skip_special_tokens=True)
    assert expected
    assert cli_text(package, "", image_file, capsys) == expected


def test_pix2struct_vqa_is_refused(built_pix2struct, image_file, tmp_path):
    package = tmp_path / "vqa"
    shutil.copytree(built_pix2struct[3], package)
    settings = json.loads((package / "preprocessor_config.json").read_text())
    (package / "preprocessor_config.json").write_text(json.dumps({**settings, "is_vqa": True}))
    with pytest.raises(MobiusError, match="VQA package renders the question"):
        ImageToTextGenerator(package, image_file)


# --- Donut: Donut Swin + mBART, its image processor, a task prompt as the start --------


@pytest.fixture(scope="module")
def built_donut(tmp_path_factory):
    from test_image_to_text_parity import bart, donut_swin, vision_encoder_decoder
    from transformers import DonutImageProcessorPil

    work = tmp_path_factory.mktemp("donut")
    decoder = bart("mbart", d_model=48, scale_embedding=True, tie_word_embeddings=False)
    config = vision_encoder_decoder(donut_swin(), decoder)  # 32x48 images
    model = make_random_image_to_text(config, seed=3)
    tokenizer = tiny_tokenizer(decoder.vocab_size, {"<s>": 0, "</s>": 2, "<s_task>": 7})
    image_processor = DonutImageProcessorPil(
        size={"height": 32, "width": 48}, do_align_long_axis=True
    )
    for part in (model, tokenizer, image_processor):
        part.save_pretrained(work / "hf")
    package = build_with_cli(work / "hf", work / "onnx")
    return model, tokenizer, image_processor, package


# Tall (turned a quarter), wide and small (padded) images.
@pytest.mark.parametrize("size", [(45, 37), (20, 61), (9, 11)])
def test_donut_pixels_match_the_image_processor(built_donut, size, tmp_path):
    from PIL import Image

    _, _, image_processor, package = built_donut
    path = tmp_path / "page.png"
    pixels = np.random.default_rng(4).integers(0, 256, (*size, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    expected = image_processor(Image.open(path), return_tensors="np").pixel_values
    got = ImageToTextGenerator(package, path).encoder_feeds()["pixel_values"]
    assert got.shape == expected.shape == (1, 3, 32, 48)
    np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0)


def test_donut_task_prompt_starts_the_decoder(built_donut, image_file, capsys):
    """transformers' ``generate`` puts no start token before a Donut task prompt."""
    from PIL import Image

    model, tokenizer, image_processor, package = built_donut
    pixels = image_processor(Image.open(image_file), return_tensors="pt").pixel_values
    prompt = tokenizer("<s_task>", add_special_tokens=False).input_ids
    with torch.no_grad():
        ids = model.generate(
            pixel_values=pixels, decoder_input_ids=torch.tensor([prompt]), do_sample=False,
            max_new_tokens=8,
        )  # fmt: skip
    expected = tokenizer.decode(ids[0, len(prompt) :], skip_special_tokens=True)
    assert expected
    assert cli_text(package, "<s_task>", image_file, capsys) == expected
