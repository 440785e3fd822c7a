"""Gemma 4 packages: their processor, ``mobius generate`` and ``mobius info``, against
transformers.

The tiny case with an audio tower (``omni_parity_cases_gemma4.py``) is made as a random
model with every parameter perturbed (then more, so that its greedy text depends on the
pixels and the sound) and saved with its real processor (``Gemma4Processor`` over the PIL
image processor and the numpy audio feature extractor), then built once with the CLI
(split form). Then:

- the package's torch-free processor (``gemma4:Gemma4Processor``) gives the ids, patches,
  patch positions, token types, log-mel frames and frame masks transformers' processor
  gives (images wide, tall, small, very wide, two in a prompt; clips long, short, two in a
  prompt; none);
- ``mobius generate PKG PROMPT --image FILE --audio FILE.wav``, with the WAV alone, with
  the image alone and with text alone prints what transformers' greedy ``generate`` decodes;
- a checkpoint without ``audio_config`` builds no audio graph; ``mobius generate --audio``
  on its package is refused in one line, as are a missing WAV and miscounted placeholders;
- ``--validate`` passes with and without the audio tower;
- ``mobius info`` names the graphs; a checkpoint whose every token attends both ways
  (``use_bidirectional_attention="all"``, an encoder) is refused in one line.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from _vl_built import BuiltVL, random_image, save_processor, write_image_and_wav
from omni_parity_cases_gemma4 import CASES
from test_omni_generate import cli_text, pixels
from test_validate_vision import _assert_passed, _build, _validation
from vl_parity_cases.gemma4 import TEXT, gemma4_config

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import build_with_cli, perturb_parameters
from mobius_audio.audio_file import read_audio
from mobius_vision.processing import HF_PROCESSOR_FILE, processor_for
from mobius_vision.testing import make_random_vl_model, random_clips

# wide, tall, small (scaled up), very wide (one pooled block high)
SIZES = ((37, 45), (45, 20), (9, 7), (6, 200))
IMG, AUD = "<image_soft_token>", "<audio_soft_token>"
PROMPT = f"USER: {IMG} w15 {AUD} w17 ASSISTANT:"
RATE = 16000


class Gemma4Built(BuiltVL):
    """A Gemma 4 family's case (this one, Gemma 4 unified's): its processor and greedy text
    over images and audio clips."""

    def hf_inputs(self, prompt: str, images: list, tensors: str = "np", audios=()) -> dict:
        batch = [images] if images else None  # the images of one prompt, as one list
        audio = list(audios) or None
        return dict(
            self.processor(text=[prompt], images=batch, audio=audio, return_tensors=tensors)
        )

    def greedy_text(self, prompt: str, images: list, audios=(), max_new_tokens: int = 8) -> str:
        inputs = self.hf_inputs(prompt, images, "pt", audios)
        with torch.no_grad():
            out = self.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        new = out[0, inputs["input_ids"].shape[1] :].tolist()
        return self.processor.tokenizer.decode(new, skip_special_tokens=True)


def assert_inputs_match(built: Gemma4Built, mine, cases) -> None:
    """``mine`` (mobius's processor) gives transformers' inputs for each ``(prompt, images,
    clips)`` of ``cases``: the same names, dtypes (float32 for floats) and values."""
    for prompt, images, clips in cases:
        what = f"{prompt!r} with {[i.shape for i in images]} and {[c.size for c in clips]}"
        expected = {
            k: np.asarray(v) for k, v in built.hf_inputs(prompt, images, audios=clips).items()
        }
        got = mine(prompt, images, clips)
        assert sorted(got) == sorted(expected), what
        for name, value in expected.items():
            assert got[name].dtype == (np.float32 if value.dtype.kind == "f" else value.dtype), name
            assert got[name].shape == value.shape, (name, what)
            np.testing.assert_allclose(
                got[name], value, atol=1e-6, rtol=0, err_msg=f"{name} {what}"
            )


def assert_bad_audio_is_refused(built: Gemma4Built, prompt: str, tmp_path, capsys) -> None:
    """Two clips for one placeholder, an empty clip: MobiusError; a missing WAV: one line."""
    mine = processor_for(built.package, built.family)
    with pytest.raises(MobiusError, match="placeholder"):  # two clips, one placeholder
        mine(f"w3 {AUD}", [], random_clips((40, 50), 1))
    with pytest.raises(MobiusError, match="no samples"):
        mine(f"w3 {AUD}", [], [np.zeros(0, np.float32)])
    capsys.readouterr()
    args = [str(built.package), prompt, "--audio", str(tmp_path / "missing.wav")]
    assert main(["generate", *args]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "no such file" in lines[0], lines


class Built(Gemma4Built):
    """The Gemma 4 case with its audio tower, its greedy text depending on pixels and sound."""

    #: BuiltVL's sharpening (scale 0.2) saturates this model (one token whatever it sees and
    #: hears); a quarter of it leaves the text depending on both (checked in the tests).
    sharpen = False

    def __init__(self, root) -> None:
        super().__init__(CASES["gemma4"], root, "gemma4")

    def make_model(self, config):
        model = make_random_vl_model(config, seed=0)
        perturb_parameters(model, seed=1, scale=0.05)
        return model


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return Built(tmp_path_factory.mktemp("gemma4"))


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """A PNG, a 16-bit PCM WAV (3200 samples at 16 kHz: 5 audio tokens) and the runner's samples."""
    image, sound = write_image_and_wav(tmp_path_factory.mktemp("media"), 3200, RATE)
    return image, sound, read_audio(sound, RATE)


@pytest.fixture(scope="module")
def without_audio(tmp_path_factory):
    """The case without ``audio_config``: its checkpoint and split package."""
    root = tmp_path_factory.mktemp("gemma4-no-audio")
    _type, make_config, make_processor, _options = CASES["gemma4-pool3-standardized-plain-text"]
    config = make_config()
    make_random_vl_model(config).save_pretrained(root / "hf")
    save_processor(make_processor(config), root / "hf")
    return root / "hf", build_with_cli(root / "hf", root / "split", "--form", "split")


def test_processor_matches_transformers(built):
    mine = processor_for(built.package, "gemma4")
    two = [random_image(SIZES[0], 7), random_image(SIZES[1], 8)]
    lengths = (3200, 1900, 5000, 400)
    cases = [
        (PROMPT, [random_image(size, i)], random_clips((n,), i))
        for i, (size, n) in enumerate(zip(SIZES, lengths, strict=True))
    ]
    cases += [
        (mine.with_placeholders("w15 w17", 2), two, []),
        (f"USER: {AUD} w3 {AUD}", [], random_clips((700, 2500), 5)),
        (mine.with_audio_placeholders("w5 w7", 1), [], random_clips((1234,), 6)),
        ("w15 w17 w19", [], []),
    ]
    assert_inputs_match(built, mine, cases)


def test_generate_with_image_and_audio_matches_transformers(built, media, capsys):
    image, sound, samples = media
    expected = built.greedy_text(PROMPT, [pixels(image)], [samples])
    # the tiny model's text depends on the image and the sound, so a wrong pixel or frame shows
    assert built.greedy_text(PROMPT, [random_image((37, 45), seed=2)], [samples]) != expected
    others = [np.zeros(3200, np.float32), random_clips((3200,), 9)[0]]
    assert any(built.greedy_text(PROMPT, [pixels(image)], [o]) != expected for o in others)
    capsys.readouterr()  # the build's lines
    args = ("--image", str(image), "--audio", str(sound))
    assert cli_text(built.package, PROMPT, capsys, *args) == expected


def test_generate_with_audio_alone_image_alone_and_text_alone(built, media, capsys):
    image, sound, samples = media
    prompt = f"USER: {AUD} w3 w8 ASSISTANT:"
    expected = built.greedy_text(prompt, [], [samples])
    assert cli_text(built.package, prompt, capsys, "--audio", str(sound)) == expected
    prompt = f"USER: {IMG} w15 w17 w19 ASSISTANT:"
    expected = built.greedy_text(prompt, [pixels(image)])
    assert cli_text(built.package, prompt, capsys, "--image", str(image)) == expected
    expected = built.greedy_text("w15 w17 w19", [])
    assert cli_text(built.package, "w15 w17 w19", capsys) == expected


def test_bad_audio_input_is_a_one_line_error(built, tmp_path, capsys):
    assert_bad_audio_is_refused(built, PROMPT, tmp_path, capsys)


@pytest.mark.parametrize(
    "setting, value, why",
    [
        ("hop_length_ms", -10.0, "hop_length_ms must be positive"),
        ("per_bin_mean", [0.0, 1.0], "per_bin_mean must be a list of 16 finite numbers"),
        ("feature_size", "16", "feature_size must be an int"),
        ("preemphasis", True, "preemphasis must be a number"),
    ],
)
def test_bad_feature_extractor_settings_are_refused(built, tmp_path, setting, value, why):
    """The package's feature extractor settings are a stranger's: each is checked."""
    package = Path(shutil.copytree(built.package, tmp_path / "package"))
    path = package / HF_PROCESSOR_FILE
    settings = json.loads(path.read_text(encoding="utf-8"))
    settings["feature_extractor"][setting] = value
    path.write_text(json.dumps(settings), encoding="utf-8")
    with pytest.raises(MobiusError, match=why):
        processor_for(package, "gemma4")(f"w3 {AUD}", [], random_clips((400,), 1))


def test_a_package_without_audio_refuses_audio_in_one_line(without_audio, media, capsys):
    _, package = without_audio
    assert not (package / "audio").exists()
    _image, sound, _ = media
    capsys.readouterr()
    assert main(["generate", str(package), f"w3 {AUD}", "--audio", str(sound)]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "takes no audio (it has no audio/ graph)" in lines[0], lines


def test_info_names_the_graphs(built, without_audio, capsys):
    for source, hears in ((built.hf, True), (without_audio[0], False)):
        capsys.readouterr()
        assert main(["info", str(source)]) == 0
        out = capsys.readouterr().out
        assert "mobius-vision (Gemma4ForConditionalGeneration)" in out, out
        assert "audio-vision-language" in out, out
        assert ("vision/, audio/, embedding/ and decoder/ graphs" in out) == hears, out
        assert ("no audio/ graph: the config has no audio tower" in out) != hears, out


def test_no_genai_config_and_why(without_audio, tmp_path, capsys):
    """onnxruntime-genai cannot run Gemma 4 (with an audio graph or without): ``--runtime
    ort-genai`` is refused in one line that says why."""
    source, _ = without_audio
    capsys.readouterr()
    args = ["build", "--model", str(source), str(tmp_path / "out"), "--runtime", "ort-genai"]
    assert main(args) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "its sliding and full attention" in lines[0], lines


@pytest.mark.parametrize("hears", [True, False])
def test_validate_compares_with_transformers(hears, built, without_audio, tmp_path):
    """``--validate`` (audio-vision-language): an image and a clip, or the image alone where
    the package has no audio graph, against transformers' Gemma4ForConditionalGeneration."""
    source = built.hf if hears else without_audio[0]
    out = _build(source, tmp_path / "validated")
    _assert_passed(out, "transformers Gemma4ForConditionalGeneration", tokens=True)
    assert ("s of audio" in _validation(out)["checked"]) == hears


def test_an_encoder_config_is_refused_in_one_line(tmp_path, capsys):
    config = gemma4_config(text=dict(TEXT, use_bidirectional_attention="all"))()
    make_random_vl_model(config).save_pretrained(tmp_path / "hf")
    capsys.readouterr()
    assert main(["build", "--model", str(tmp_path / "hf"), str(tmp_path / "out")]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "use_bidirectional_attention='all' makes an encoder" in lines[0]
