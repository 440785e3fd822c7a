"""Phi-4-multimodal packages: the torch-free processor, ``mobius generate PKG PROMPT --image
FILE`` and ``mobius info``, against transformers.

The tiny case (:mod:`phi4mm_case`) is made as a random ``Phi4MultimodalForCausalLM`` with
every parameter perturbed (and again, more, so that its greedy text depends on the
image), saved with its ``Phi4MultimodalProcessor`` and built once with the CLI (split
form). Then:

- the package's processor gives the ids, crops, masks and sizes the transformers
  processor gives (its image part is mobius' numpy one, torchvision being absent), and
  the two resizes it imitates are PyTorch's (``interpolate``: bicubic for the global
  view, antialiased bilinear on uint8 for the canvas);
- ``mobius generate`` with an image, and with text alone, prints transformers' greedy text;
- ``--audio`` is refused in one line (the audio encoder is not built yet), as are
  miscounted placeholders; ``mobius info`` names what is built.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _vl_built import (
    BuiltVL,
    assert_generate_with_image,
    assert_generate_without_image,
    assert_miscounted_placeholders_fail,
    random_image,
)
from phi4mm_case import IMG, PROMPTS, phi4mm_config, phi4mm_processor
from test_vl_processors_b import assert_same_inputs

from mobius.cli import main
from mobius.testing import perturb_parameters
from mobius_vision.processing import processor_for
from mobius_vision.processing._antialias import resize_antialiased
from mobius_vision.processing.phi4_multimodal import closest_aspect_ratio, torch_bicubic
from mobius_vision.testing._omni_parity import make_random_model

# a 2x1 grid (rows padded), 1x2 (columns padded), a single crop, and 3x3 past the 4 crops
# allowed (the grid of closest ratio), resized down
SIZES = ((40, 100), (100, 45), (20, 30), (150, 170))


class Built(BuiltVL):
    def __init__(self, root) -> None:
        case = ("phi4_multimodal", phi4mm_config, phi4mm_processor)
        super().__init__(case, root, "phi4_multimodal")
        self.prompt = PROMPTS[0]

    def make_model(self, config):
        model = make_random_model(config, "Phi4MultimodalForCausalLM", seed=0)
        # Some 700 image tokens average out: sharper weights make the text follow the image.
        perturb_parameters(model, seed=2, scale=0.5)
        return model


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return Built(tmp_path_factory.mktemp("phi4_multimodal"))


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    from PIL import Image

    path = tmp_path_factory.mktemp("image") / "wide.png"
    Image.fromarray(random_image((40, 100), seed=1)).save(path)
    return path


def test_processor_matches_transformers(built):
    mine = processor_for(built.package, built.family)
    assert mine.image_token == IMG
    cases = [(built.prompt, [random_image(size, i)]) for i, size in enumerate(SIZES)]
    two = [random_image(SIZES[0], 7), random_image(SIZES[2], 8)]
    cases += [(mine.with_placeholders("w5 w7", 2), two), ("w5 w7 w9", [])]
    for prompt, images in cases:
        what = f"{prompt!r} with {[i.shape for i in images]}"
        expected = built.processor(text=[prompt], images=images or None, return_tensors="np")
        expected = {k: np.asarray(v) for k, v in expected.items()}
        assert_same_inputs(mine(prompt, images), expected, what)


@pytest.mark.parametrize("size", [(64, 128), (128, 64), (57, 64), (64, 40)])
def test_global_view_resize_is_torchs_bicubic(size):
    image = np.random.default_rng(0).standard_normal((3, *size)).astype(np.float32)
    expected = torch.nn.functional.interpolate(
        torch.from_numpy(image)[None], size=(32, 32), mode="bicubic", align_corners=False
    )[0].numpy()
    np.testing.assert_allclose(torch_bicubic(image, (32, 32)), expected, atol=2e-6, rtol=0)


@pytest.mark.parametrize("size, target", [((40, 100), (51, 128)), ((150, 170), (128, 145))])
def test_canvas_resize_is_torchs_antialiased_bilinear(size, target):
    image = np.random.default_rng(1).integers(0, 256, (3, *size), dtype=np.uint8)
    expected = torch.nn.functional.interpolate(
        torch.from_numpy(image)[None], size=target, mode="bilinear", antialias=True
    )[0].numpy()
    np.testing.assert_array_equal(resize_antialiased(image, target), expected)


def test_grid_past_the_crop_limit_is_the_closest_ratio():
    assert closest_aspect_ratio(150, 170, 64, 4) == (2, 2)
    assert closest_aspect_ratio(40, 300, 64, 4) == (4, 1)


def test_generate_with_image_matches_transformers(built, image_file, capsys):
    assert_generate_with_image(built, image_file, capsys)


def test_generate_without_image_matches_transformers(built, capsys):
    assert_generate_without_image(built, capsys)


def test_placeholders_that_miscount_the_images_are_a_one_line_error(built, image_file, capsys):
    assert_miscounted_placeholders_fail(built, image_file, capsys)


def test_audio_is_refused_in_one_line(built, image_file, tmp_path, capsys):
    sound = tmp_path / "a.wav"
    sound.write_bytes(b"RIFF")
    capsys.readouterr()
    args = [str(built.package), f"{IMG} w5", "--image", str(image_file), "--audio", str(sound)]
    assert main(["generate", *args]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "takes no audio" in lines[0], lines


def test_info_names_what_is_built(built, capsys):
    capsys.readouterr()
    assert main(["info", str(built.hf)]) == 0
    out = capsys.readouterr().out
    assert "phi4_multimodal" in out and "vision-language" in out


def test_a_missing_image_is_a_one_line_error(built, tmp_path, capsys):
    capsys.readouterr()
    missing = tmp_path / "missing.png"
    assert main(["generate", str(built.package), f"{IMG} w5", "--image", str(missing)]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "missing.png" in lines[0], lines
