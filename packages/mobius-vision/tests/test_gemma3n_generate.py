"""Gemma 3n packages: their processor, ``mobius generate``, ``mobius info`` and ``--validate``,
against transformers.

The tiny case (``omni_parity_cases_gemma3n.py``) is made as a random model with every
parameter perturbed (then more, so that its greedy text depends on the pixels and the
sound), saved with its real processor (``Gemma3nProcessor`` over SigLIP's PIL image
processor and the numpy audio feature extractor) and built once with the CLI (split form).
transformers builds the vision tower with timm: without it every test skips. Then:

- the package's torch-free processor (``gemma3n:Gemma3nProcessor``) gives the ids, pixels,
  token types, log-mel frames and frame masks transformers' processor gives (clips long,
  short, two in a prompt; none);
- ``mobius generate PKG PROMPT --image FILE --audio FILE.wav``, with the WAV alone and with
  text alone prints what transformers' greedy ``generate`` decodes;
- a missing WAV and miscounted placeholders are refused in one line;
- ``mobius info`` names the graphs; ``--validate`` passes.
"""

from __future__ import annotations

import numpy as np
import pytest
from _vl_built import random_image, write_image_and_wav
from omni_parity_cases_gemma3n import CASES
from test_gemma4_generate import Built as Gemma4Case
from test_gemma4_generate import Gemma4Built, assert_bad_audio_is_refused, assert_inputs_match
from test_omni_generate import cli_text, pixels
from test_validate_vision import _assert_passed, _build, _validation

from mobius.cli import main
from mobius_audio.audio_file import read_audio
from mobius_vision.processing import processor_for
from mobius_vision.testing import random_clips

IMG, AUD = "<image_soft_token>", "<audio_soft_token>"
PROMPT = f"USER: {IMG} w15 {AUD} w17 ASSISTANT:"
RATE = 16000
SAMPLES = 6400  # 37 mel frames: 3 of the 5 audio tokens real


class Built(Gemma4Case):
    """The Gemma 3n case, made as Gemma 4's (a milder second perturbation: BuiltVL's makes
    logits so large that fp32 rounding in the vision tower passes --validate's 1e-3)."""

    def __init__(self, root) -> None:
        Gemma4Built.__init__(self, CASES["gemma3n"], root, "gemma3n")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return Built(tmp_path_factory.mktemp("gemma3n"))


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """A PNG, a 16-bit PCM WAV and the runner's samples of it."""
    image, sound = write_image_and_wav(tmp_path_factory.mktemp("media"), SAMPLES, RATE)
    return image, sound, read_audio(sound, RATE)


def test_processor_matches_transformers(built):
    mine = processor_for(built.package, "gemma3n")
    sizes, lengths = ((37, 45), (45, 20), (9, 7)), (SAMPLES, 2600, 300)
    cases = [
        (PROMPT, [random_image(size, i)], random_clips((n,), i))
        for i, (size, n) in enumerate(zip(sizes, lengths, strict=True))
    ]
    cases += [
        (f"USER: {AUD} w3 {AUD}", [], random_clips((700, 4000), 5)),
        (mine.with_audio_placeholders("w5 w7", 1), [], random_clips((1234,), 6)),
        (f"w3 {IMG}", [random_image((20, 30), 7)], []),
        ("w15 w17 w19", [], []),
    ]
    assert_inputs_match(built, mine, cases)


def test_generate_with_image_and_audio_matches_transformers(built, media, capsys):
    image, sound, samples = media
    expected = built.greedy_text(PROMPT, [pixels(image)], [samples])
    # the tiny model's text depends on the image and the sound, so a wrong pixel or frame shows
    assert built.greedy_text(PROMPT, [random_image((37, 45), seed=2)], [samples]) != expected
    others = [np.zeros(SAMPLES, np.float32), random_clips((SAMPLES,), 9)[0]]
    assert any(built.greedy_text(PROMPT, [pixels(image)], [o]) != expected for o in others)
    capsys.readouterr()  # the build's lines
    args = ("--image", str(image), "--audio", str(sound))
    assert cli_text(built.package, PROMPT, capsys, *args) == expected


def test_generate_with_audio_alone_and_text_alone(built, media, capsys):
    _, sound, samples = media
    prompt = f"USER: {AUD} w3 w8 ASSISTANT:"
    expected = built.greedy_text(prompt, [], [samples])
    assert cli_text(built.package, prompt, capsys, "--audio", str(sound)) == expected
    expected = built.greedy_text("w15 w17 w19", [])
    assert cli_text(built.package, "w15 w17 w19", capsys) == expected


def test_bad_audio_input_is_a_one_line_error(built, tmp_path, capsys):
    assert_bad_audio_is_refused(built, PROMPT, tmp_path, capsys)


def test_info_names_the_graphs(built, capsys):
    capsys.readouterr()
    assert main(["info", str(built.hf)]) == 0
    out = capsys.readouterr().out
    assert "mobius-vision (Gemma3nForConditionalGeneration)" in out, out
    assert "audio-vision-language" in out, out
    assert "vision/, audio/, embedding/ and decoder/ graphs" in out, out


def test_validate_compares_with_transformers(built, tmp_path):
    """``--validate`` (audio-vision-language): an image and a clip against transformers'
    Gemma3nForConditionalGeneration."""
    out = _build(built.hf, tmp_path / "validated")
    _assert_passed(out, "transformers Gemma3nForConditionalGeneration", tokens=True)
    assert "s of audio" in _validation(out)["checked"]
