"""Phi-4-multimodal packages: the torch-free processor, ``mobius generate PKG PROMPT
[--image FILE] [--audio FILE]`` and ``mobius info``, against transformers.

The tiny case (:mod:`phi4mm_case`) is made as a random ``Phi4MultimodalForCausalLM`` with
every parameter perturbed (and again, more, so that its greedy text depends on the
image and the sound), saved with its ``Phi4MultimodalProcessor`` and built once with
the CLI (split form). Then:

- the package's processor gives the ids, crops, masks, sizes and audio features the
  transformers processor gives (its image part is mobius' numpy one, torchvision being
  absent; its audio part transformers' PyTorch feature extractor: the log-mels agree to
  float32 rounding), and the two resizes it imitates are PyTorch's (``interpolate``:
  bicubic for the global view, antialiased bilinear on uint8 for the canvas);
- the audio graph equals transformers' audio embedding on a clip of over 500 tokens
  (40 s: the encoder attends within windows of 500);
- ``mobius generate`` with an image and a sound, a sound alone, an image alone, and text
  alone prints transformers' greedy text;
- miscounted placeholders and an unreadable sound are one-line errors; ``mobius info``
  names what is built.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from _vl_built import (
    BuiltVL,
    assert_generate_with_image,
    assert_generate_without_image,
    assert_miscounted_placeholders_fail,
    random_image,
    rgb,
    write_image_and_wav,
)
from phi4mm_case import AUD, IMG, PROMPTS, graph_inputs, phi4mm_config, phi4mm_processor
from test_vl_processors_b import assert_same_inputs

from mobius.cli import main
from mobius.errors import ConfigError
from mobius.testing import PARITY_ATOL, build_with_cli, perturb_parameters
from mobius_audio.audio_file import read_audio
from mobius_vision.models._phi4mm_audio import Phi4MultimodalAudioConfig
from mobius_vision.processing import processor_for
from mobius_vision.processing._antialias import resize_antialiased
from mobius_vision.processing.phi4_multimodal import closest_aspect_ratio, torch_bicubic
from mobius_vision.testing import random_clips
from mobius_vision.testing._omni_parity import make_random_model
from mobius_vision.vl_model import cpu_session

# a 2x1 grid (rows padded), 1x2 (columns padded), a single crop, and 3x3 past the 4 crops
# allowed (the grid of closest ratio), resized down
SIZES = ((40, 100), (100, 45), (20, 30), (150, 170))
RATE = 16000
SEEING = f"<|user|>{IMG} w5 {AUD} w7<|end|><|assistant|>"
HEARING = f"<|user|>{AUD} w3 w8<|end|><|assistant|>"
#: transformers' log-mels (PyTorch's FFT and matmul) against numpy's: float32 rounding
FEATURE_RTOL = 4e-7


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

    def hf_inputs(self, prompt: str, images: list, tensors: str = "np", audios=()) -> dict:
        batch = self.processor(
            text=[prompt], images=images or None, audio=list(audios) or None, return_tensors=tensors
        )
        return dict(batch)

    def greedy_text(self, prompt: str, images: list, max_new_tokens: int = 8, audios=()) -> str:
        inputs = self.hf_inputs(prompt, images, "pt", audios)
        with torch.no_grad():
            out = self.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        new = out[0, inputs["input_ids"].shape[1] :].tolist()
        return self.processor.tokenizer.decode(new, skip_special_tokens=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return Built(tmp_path_factory.mktemp("phi4_multimodal"))


@pytest.fixture(scope="module")
def image_file(tmp_path_factory):
    from PIL import Image

    path = tmp_path_factory.mktemp("image") / "wide.png"
    Image.fromarray(random_image((40, 100), seed=1)).save(path)
    return path


@pytest.fixture(scope="module")
def sound(tmp_path_factory):
    """A 16-bit PCM WAV (0.6 s at 16 kHz) and the samples the runner reads from it."""
    _, path = write_image_and_wav(tmp_path_factory.mktemp("sound"), 9600, RATE)
    return path, read_audio(path, RATE)


def test_processor_matches_transformers(built):
    mine = processor_for(built.package, built.family)
    assert (mine.image_token, mine.audio_token, mine.sampling_rate) == (IMG, AUD, RATE)
    cases = [(built.prompt, [random_image(size, i)], []) for i, size in enumerate(SIZES)]
    two = [random_image(SIZES[0], 7), random_image(SIZES[2], 8)]
    cases += [(mine.with_placeholders("w5 w7", 2), two, []), ("w5 w7 w9", [], [])]
    cases += [
        (SEEING, [random_image(SIZES[1], 3)], random_clips((16000,), 1)),
        (HEARING, [], random_clips((7000,), 2)),
        (f"{AUD} w3 {AUD} w5", [], random_clips((4000, 12345), 3)),  # the tail zeroed
        (mine.with_audio_placeholders("w5 w7", 1), [], random_clips((400,), 4)),  # one frame
    ]
    for prompt, images, clips in cases:
        what = f"{prompt!r} with {[i.shape for i in images]} and {[c.size for c in clips]}"
        expected = graph_inputs(built.hf_inputs(prompt, images, audios=clips))
        expected = {k: np.asarray(v) for k, v in expected.items()}
        got = mine(prompt, images, clips)
        if clips:
            np.testing.assert_allclose(
                got.pop("input_features"), expected.pop("input_features"), rtol=FEATURE_RTOL
            )
            mask = got.pop("feature_attention_mask")
            assert mask.dtype == bool, what
            np.testing.assert_array_equal(mask, expected.pop("feature_attention_mask"))
        assert_same_inputs(got, expected, what)


def test_audio_graph_attends_in_windows_of_500_tokens(built):
    """A 41 s clip (516 tokens) against transformers' audio embedding (speech projections),
    which cuts the tokens into windows of 500, the last padded."""
    clip = random_clips((660000,), seed=5)
    batch = built.processor.audio_processor(clip, sampling_rate=RATE, return_tensors="np")
    inputs = graph_inputs(batch)
    (got,) = cpu_session(built.package / "audio" / "model.onnx").run(None, inputs)
    embedding = built.model.model.embed_tokens_extend.audio_embed
    with torch.no_grad():
        states = embedding.encoder(torch.from_numpy(batch["audio_input_features"]), None)
        expected = embedding.down_proj_for_speech(
            torch.nn.functional.gelu(embedding.up_proj_for_speech(states))
        )[0].numpy()
    assert got.shape == expected.shape == (516, phi4mm_config().hidden_size)
    np.testing.assert_allclose(got, expected, atol=PARITY_ATOL, rtol=0)


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


def test_streaming_chunks_match_transformers(tmp_path):
    """``chunk_size`` 4, ``left_chunk`` 1: each token sees its chunk and the one before."""
    config = phi4mm_config()
    config.audio_config.chunk_size, config.audio_config.left_chunk = 4, 1
    model = make_random_model(config, "Phi4MultimodalForCausalLM", seed=3)
    model.save_pretrained(tmp_path / "hf")
    package = build_with_cli(tmp_path / "hf", tmp_path / "out")
    session = cpu_session(package / "audio" / "model.onnx")
    embedding = model.model.embed_tokens_extend.audio_embed
    extractor = phi4mm_processor(config).audio_processor
    for lengths in ((16000, 7000), (16000,)):
        batch = extractor(random_clips(lengths, 0), sampling_rate=RATE, return_tensors="pt")
        (got,) = session.run(None, graph_inputs({k: v.numpy() for k, v in batch.items()}))
        with torch.no_grad():
            states = embedding.encoder(
                batch["audio_input_features"], batch.get("audio_attention_mask")
            )
            states = embedding.down_proj_for_speech(
                torch.nn.functional.gelu(embedding.up_proj_for_speech(states))
            )
        sizes = batch["audio_embed_sizes"].tolist()
        expected = torch.cat([states[i, :n] for i, n in enumerate(sizes)]).numpy()
        # The chunks add +1 to the scores they let through (module docstring of
        # _phi4mm_audio): in this tiny encoder that moves the features by some 1e-4 only,
        # so they are held to 1e-6 (they agree to 3e-8).
        np.testing.assert_allclose(got, expected, atol=1e-6, rtol=0, err_msg=str(lengths))


def test_generate_with_image_matches_transformers(built, image_file, capsys):
    assert_generate_with_image(built, image_file, capsys)


def test_generate_with_image_and_audio_matches_transformers(built, image_file, sound, capsys):
    path, samples = sound
    image = rgb(image_file)
    # (some 500 image tokens outweigh the 6 audio ones here: the parity test shows the
    # vision-speech projections at work, the next test that the text follows the sound)
    expected = built.greedy_text(SEEING, [image], audios=[samples])
    capsys.readouterr()  # the build's lines
    args = [str(built.package), SEEING, "--image", str(image_file), "--audio", str(path)]
    assert main(["generate", *args, "--max-new-tokens", "8"]) == 0
    assert capsys.readouterr().out == expected + "\n"


def test_generate_with_audio_alone_matches_transformers(built, sound, capsys):
    path, samples = sound
    expected = built.greedy_text(HEARING, [], audios=[samples])
    # the tiny model's text depends on the sound, so a wrong feature or projection shows
    tone = 0.5 * np.sin(np.arange(9600, dtype=np.float32) * (2 * np.pi * 440 / RATE))
    others = [tone.astype(np.float32), np.zeros(9600, np.float32)]  # a tone, silence
    assert any(built.greedy_text(HEARING, [], audios=[o]) != expected for o in others)
    capsys.readouterr()
    args = [str(built.package), HEARING, "--audio", str(path), "--max-new-tokens", "8"]
    assert main(["generate", *args]) == 0
    assert capsys.readouterr().out == expected + "\n"


def test_f16_build_hears(built, sound):
    """An f16 build's audio graph (the chosen projection's weights, the +1 key mask in f16)
    runs and gives as many features as the processor puts placeholders."""
    package = build_with_cli(built.hf, built.hf.parent / "f16", "--dtype", "f16")
    mine = processor_for(package, built.family)
    inputs = mine(HEARING, [], [sound[1]])
    names = ("input_features", "feature_attention_mask", "audio_sizes", "audio_projection_mode")
    feeds = {name: inputs[name] for name in names}
    feeds["input_features"] = feeds["input_features"].astype(np.float16)
    (features,) = cpu_session(package / "audio" / "model.onnx").run(None, feeds)
    assert features.dtype == np.float16 and np.isfinite(features).all()
    assert len(features) == (inputs["input_ids"] == mine.token_id(AUD)).sum()


def test_audio_configs_the_graph_cannot_build_are_refused():
    audio = phi4mm_config().audio_config
    for name, value, message in (
        ("ext_pw_out_channel", 8, "ext_pw_out_channel 8 != 16"),
        ("downsample_rate", 2, "downsample_rate 2"),
        ("time_reduction", 6, "time_reduction 6"),
        ("num_blocks", "2", "num_blocks is '2', not an int"),
    ):
        with pytest.raises(ConfigError, match=message):
            Phi4MultimodalAudioConfig.from_hf(SimpleNamespace(**{**audio.to_dict(), name: value}))


def test_generate_without_image_matches_transformers(built, capsys):
    assert_generate_without_image(built, capsys)


def test_placeholders_that_miscount_the_images_are_a_one_line_error(built, image_file, capsys):
    assert_miscounted_placeholders_fail(built, image_file, capsys)


def test_bad_audio_is_a_one_line_error(built, sound, tmp_path, capsys):
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("not a sound")
    short = f"{AUD} w5 {AUD}"
    for prompt, path, message in (
        (HEARING, tmp_path / "missing.wav", "no such file"),
        (HEARING, not_audio, "cannot decode"),
        (short, sound[0], f"holds 2 {AUD} placeholder(s) for 1 audio clip(s)"),
    ):
        capsys.readouterr()
        assert main(["generate", str(built.package), prompt, "--audio", str(path)]) != 0
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], lines


def test_info_names_what_is_built(built, capsys):
    capsys.readouterr()
    assert main(["info", str(built.hf)]) == 0
    out = capsys.readouterr().out
    assert "phi4_multimodal" in out and "audio-vision-language" in out, out
    assert "whole: vision/, audio/, embedding/ and decoder/ graphs" in out, out


def test_validate_compares_with_transformers(built, tmp_path):
    """``--validate``: mobius' processor's sample (an image and 0.6 s of audio) through the
    package and through transformers' model, fed its own names of the inputs."""
    out = tmp_path / "validated"
    assert main(["build", "--model", str(built.hf), str(out), "-q", "--validate"]) == 0
    validation = json.loads((out / "mobius.json").read_text())["validation"]
    assert validation["passed"] is True, validation
    assert validation["reference"] == "transformers Phi4MultimodalForCausalLM", validation
    assert "0.6 s of audio" in validation["checked"], validation
    assert max(validation["diffs"].values()) <= PARITY_ATOL, validation


def test_a_missing_image_is_a_one_line_error(built, tmp_path, capsys):
    capsys.readouterr()
    missing = tmp_path / "missing.png"
    assert main(["generate", str(built.package), f"{IMG} w5", "--image", str(missing)]) != 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "missing.png" in lines[0], lines
