"""Gemma 4 unified packages: their processor, ``mobius generate PKG PROMPT --image FILE
--audio FILE`` and ``mobius info``, against transformers.

The tiny case (``omni_parity_cases_gemma4_unified.py``, with the config's default
``use_bidirectional_attention="vision"``) is made as a random model with every parameter
perturbed (then more, so that its greedy text depends on the pixels and the sound),
saved with its processor and built once with the CLI (split form). The package's
processor settings are then those of a hub checkpoint's unified image processor
(``patch_size`` 4, ``pooling_kernel_size`` 2), whose layout transformers' PIL Gemma 4
image processor gives with 8-pixel patches unpooled (the unified one needs torchvision,
not installed). Then:

- the package's torch-free processor (``gemma4_unified:Gemma4UnifiedProcessor``) gives the
  ids, merged patches, positions, token types, waveform frames and frame masks
  transformers' processor gives (images wide, tall, small; one clip, two, none);
- ``mobius generate`` with an image and a WAV file, with the WAV alone, and with text
  alone prints what transformers' greedy ``generate`` decodes;
- ``mobius info`` names what is built; a config without audio is refused in one line.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from _vl_built import random_image, write_image_and_wav
from omni_parity_cases_gemma4_unified import CASES, TEXT, VISION, gemma4_unified_config
from test_gemma4_generate import Gemma4Built, assert_bad_audio_is_refused, assert_inputs_match
from test_omni_generate import cli_text, pixels

from mobius.cli import main
from mobius_audio.audio_file import read_audio
from mobius_vision.processing import HF_PROCESSOR_FILE, processor_for
from mobius_vision.testing import random_clips
from mobius_vision.testing._omni_parity import as_model_inputs, make_random_model

IMG, AUD = "<image_soft_token>", "<audio_soft_token>"
PROMPT = f"USER: {IMG} w15 {AUD} w17 ASSISTANT:"
RATE = 16000
MODEL_CLASS = "Gemma4UnifiedForConditionalGeneration"


class Built(Gemma4Built):
    """The case with image runs attending both ways, its processor settings the hub's."""

    def __init__(self, root) -> None:
        _type, _config, make_processor, options = CASES["gemma4_unified"]
        both_ways = gemma4_unified_config(dict(TEXT, use_bidirectional_attention="vision"))
        case = ("gemma4_unified", both_ways, make_processor, options)
        super().__init__(case, root, "gemma4_unified")
        path = self.package / HF_PROCESSOR_FILE
        settings = json.loads(path.read_text(encoding="utf-8"))
        settings["image_processor"].update(
            patch_size=VISION["patch_size"], pooling_kernel_size=VISION["pooling_kernel_size"]
        )
        path.write_text(json.dumps(settings), encoding="utf-8")

    def make_model(self, config):
        return make_random_model(config, MODEL_CLASS, seed=0)

    def hf_inputs(self, prompt: str, images: list, tensors: str = "np", audios=()) -> dict:
        batch = self.processor(
            text=[prompt],
            images=[images] if images else None,
            audio=list(audios) or None,
            return_tensors="np",
        )
        inputs = dict(batch) if tensors == "np" else as_model_inputs(batch)
        if tensors == "pt":
            import torch

            inputs = {k: torch.from_numpy(v) for k, v in inputs.items()}
            if "input_features_mask" in inputs:
                inputs["input_features_mask"] = inputs["input_features_mask"].bool()
        return inputs


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return Built(tmp_path_factory.mktemp("gemma4_unified"))


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """A PNG, a 16-bit PCM WAV (200 samples at 16 kHz: 13 frames) and the runner's samples."""
    image, sound = write_image_and_wav(tmp_path_factory.mktemp("media"), 200, RATE)
    return image, sound, read_audio(sound, RATE)


def test_processor_matches_transformers(built):
    mine = processor_for(built.package, "gemma4_unified")
    sizes = ((37, 45), (45, 20), (9, 7))
    cases = [
        (PROMPT, [random_image(size, i)], random_clips((n,), i))
        for i, (size, n) in enumerate(zip(sizes, (200, 90, 16), strict=True))
    ]
    cases += [
        (f"USER: {AUD} w3 {AUD}", [], random_clips((50, 170), 5)),
        (mine.with_audio_placeholders("w5 w7", 1), [], random_clips((33,), 6)),
        (f"w3 {IMG}", [random_image((20, 30), 7)], []),
        ("w15 w17 w19", [], []),
    ]
    assert_inputs_match(built, mine, cases)


def test_bad_audio_input_is_a_one_line_error(built, tmp_path, capsys):
    assert_bad_audio_is_refused(built, PROMPT, tmp_path, capsys)


def test_generate_with_image_and_audio_matches_transformers(built, media, capsys):
    image, sound, samples = media
    expected = built.greedy_text(PROMPT, [pixels(image)], [samples])
    # the tiny model's text depends on the image and the sound, so a wrong pixel or frame shows
    other_image = random_image((37, 45), seed=2)
    assert built.greedy_text(PROMPT, [other_image], [samples]) != expected
    others = [np.zeros(200, np.float32), 0.5 * np.ones(200, np.float32)]
    assert any(built.greedy_text(PROMPT, [pixels(image)], [o]) != expected for o in others)
    capsys.readouterr()  # the build's lines
    args = ("--image", str(image), "--audio", str(sound))
    assert cli_text(built.package, PROMPT, capsys, *args) == expected


def test_generate_with_audio_alone_and_text_alone(built, media, capsys):
    _, sound, samples = media
    prompt = f"USER: {AUD} w3 w8 ASSISTANT:"
    expected = built.greedy_text(prompt, [], [samples])
    assert cli_text(built.package, prompt, capsys, "--audio", str(sound)) == expected
    expected = built.greedy_text("w5 w7 w9", [])
    assert cli_text(built.package, "w5 w7 w9", capsys) == expected


def test_info_names_what_is_built(built, capsys):
    capsys.readouterr()
    assert main(["info", str(built.hf)]) == 0
    out = capsys.readouterr().out
    assert f"mobius-vision ({MODEL_CLASS})" in out, out
    assert "audio-vision-language" in out, out


def test_a_config_without_audio_is_refused_in_one_line(tmp_path, capsys):
    config = gemma4_unified_config()()
    config.audio_config = None
    (tmp_path / "hf").mkdir()
    config.save_pretrained(tmp_path / "hf")
    capsys.readouterr()
    assert main(["build", "--model", str(tmp_path / "hf"), str(tmp_path / "out")]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "lacks vision_config or audio_config" in lines[0], lines
