"""Qwen2.5-Omni and Qwen3-Omni packages (the thinker, and a whole checkpoint's): their
processor, ``mobius generate PKG PROMPT --image FILE --audio FILE`` and ``mobius info``,
against transformers.

Each tiny case (``omni_parity_cases``) is made as a random model with every parameter
perturbed (and again, more, so that its greedy text depends on the image and the sound),
saved with its real ``Qwen2_5OmniProcessor`` (the Whisper feature extractor's settings
nested in ``processor_config.json`` as transformers 5 saves them) and built once with the
CLI (split form). Then:

- the package's torch-free processor (``qwen2_5_omni:Qwen2_5OmniProcessor``, and its
  ``Qwen3OmniMoeProcessor``) gives the
  ids, pixels, grids, log-mel features and feature masks transformers' processor gives,
  and the M-RoPE positions the thinker's ``get_rope_index`` gives;
- ``mobius generate`` with an image and a WAV file, with the WAV alone, and with text
  alone prints what the thinker's greedy ``generate`` decodes;
- a missing or unreadable audio file, and ``--audio`` for a package that does not hear,
  are one-line errors; ``mobius info`` names what is built (and, for a whole checkpoint,
  that the talker is not).
"""

from __future__ import annotations

import numpy as np
import pytest
from _vl_built import BuiltVL, write_image_and_wav
from omni_parity_cases import AUD, CASES, IMG
from test_vl_generate import random_image
from test_vl_processors_b import assert_same_inputs
from vl_parity_cases import all_cases

from mobius.cli import main
from mobius.testing import PARITY_ATOL, build_with_cli
from mobius_audio.audio_file import read_audio
from mobius_vision.processing import processor_for
from mobius_vision.testing import make_random_vl_model, random_clips
from mobius_vision.testing._omni_parity import as_model_inputs, make_random_model
from mobius_vision.vl_model import cpu_session

PROMPT = f"USER: {IMG} w11 {AUD} w7 ASSISTANT:"
RATE = 16000
#: log-mel features from transformers' torch path against its numpy path (the runner's)
FEATURE_ATOL = 1e-4


class Built(BuiltVL):
    """One case of :data:`omni_parity_cases.CASES`; ``reference`` computes the text."""

    def __init__(self, case: str, root) -> None:
        self.case = case
        super().__init__(CASES[case], root, CASES[case][0])
        self.reference = getattr(self.model, self.options.get("reference_part") or "", self.model)

    def make_model(self, config):
        return make_random_model(config, self.options["model_class"], seed=0)

    def hf_inputs(self, prompt: str, images: list, tensors: str = "np", audios=()) -> dict:
        batch = self.processor(
            text=[prompt], images=images or None, audio=list(audios) or None, return_tensors="np"
        )
        inputs = as_model_inputs(batch)
        if tensors == "pt":
            import torch

            return {k: torch.from_numpy(v) for k, v in inputs.items()}
        return inputs

    def greedy_text(self, prompt: str, images: list, audios=(), max_new_tokens: int = 8) -> str:
        import torch

        inputs = self.hf_inputs(prompt, images, "pt", audios)
        with torch.no_grad():
            out = self.reference.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
        new = out[0, inputs["input_ids"].shape[1] :].tolist()
        return self.processor.tokenizer.decode(new, skip_special_tokens=True)


@pytest.fixture(scope="module", params=sorted(CASES))
def built(request, tmp_path_factory):
    return Built(request.param, tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """A PNG, a 16-bit PCM WAV (0.6 s at 16 kHz) and the samples the runner reads from it."""
    image, sound = write_image_and_wav(tmp_path_factory.mktemp("media"), 9600, RATE)
    return image, sound, read_audio(sound, RATE)


def pixels(path) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGB"))


def cli_text(package, prompt: str, capsys, *options: str) -> str:
    """What ``mobius generate`` prints on stdout (8 new tokens at most); the stats on stderr."""
    assert main(["generate", str(package), prompt, "--max-new-tokens", "8", *options]) == 0
    out, err = capsys.readouterr()
    assert "new tokens" in err
    return out.removesuffix("\n")


def test_processor_and_positions_match_transformers(built):
    mine = processor_for(built.package, built.family)
    sizes = ((37, 45), (45, 20), (16, 16))
    lengths = (16000, 7000, 3210)
    pairs = [
        (PROMPT, [random_image(size, i)], random_clips((n,), i))
        for i, (size, n) in enumerate(zip(sizes, lengths, strict=True))
    ]
    pairs.append((f"USER: {AUD} w3 {AUD}", [], random_clips((4000, 12345), 5)))
    pairs.append((mine.with_audio_placeholders("w5 w7", 1), [], random_clips((800,), 6)))
    for prompt, images, clips in pairs:
        what = f"{prompt!r} with {[i.shape for i in images]} and {[c.size for c in clips]}"
        expected = built.hf_inputs(prompt, images, audios=clips)
        got = mine(prompt, images, clips)
        np.testing.assert_allclose(
            got.pop("input_features"), expected.pop("input_features"), atol=FEATURE_ATOL, rtol=0
        )
        assert_same_inputs(got, expected, what)
        if images:
            positions, deltas = CASES[built.case][3]["rope_positions"](built.reference, expected)
            got_positions, got_deltas = mine.rope_positions(got)
            np.testing.assert_array_equal(got_positions, positions, err_msg=what)
            np.testing.assert_array_equal(got_deltas, deltas, err_msg=what)


def test_audio_features_match_transformers(built):
    """The audio graph against the thinker's ``get_audio_features``: clips shorter than a
    chunk (which Qwen3-Omni pads to the longest of them), one of several chunks, and a
    batch of both."""
    import torch

    session = cpu_session(built.package / "audio" / "model.onnx")
    for lengths in ((7000,), (3000, 5210), (51200,), (51200, 3000)):
        clips = random_clips(lengths, seed=len(lengths))
        batch = built.processor.feature_extractor(
            clips, sampling_rate=RATE, return_attention_mask=True, padding=True, return_tensors="np"
        )
        features = np.asarray(batch["input_features"], np.float32)
        mask = np.asarray(batch["attention_mask"], np.int64)
        (got,) = session.run(None, {"input_features": features, "feature_attention_mask": mask})
        with torch.no_grad():
            expected = built.reference.get_audio_features(
                torch.from_numpy(features), torch.from_numpy(mask)
            ).last_hidden_state.numpy()
        assert got.shape == expected.shape, lengths
        np.testing.assert_allclose(got, expected, atol=PARITY_ATOL, rtol=0, err_msg=str(lengths))


def test_generate_with_image_and_audio_matches_transformers(built, media, capsys):
    image, sound, samples = media
    expected = built.greedy_text(PROMPT, [pixels(image)], [samples])
    # the tiny model's text depends on the sound, so a wrong feature or token shows
    tone = 0.5 * np.sin(np.arange(9600, dtype=np.float32) * (2 * np.pi * 440 / RATE))
    others = [tone.astype(np.float32), np.zeros(9600, np.float32)]  # a tone, silence
    assert any(built.greedy_text(PROMPT, [pixels(image)], [other]) != expected for other in others)
    capsys.readouterr()  # the build's lines
    args = ("--image", str(image), "--audio", str(sound))
    assert cli_text(built.package, PROMPT, capsys, *args) == expected
    if built.family == "qwen2_5_omni_thinker":  # one family in the single-graph form too
        single = build_with_cli(built.hf, built.hf.parent / "single", "--form", "single")
        capsys.readouterr()
        assert cli_text(single, PROMPT, capsys, *args) == expected
        assert cli_text(single, f"USER: {AUD} w3", capsys, "--audio", str(sound)) == (
            built.greedy_text(f"USER: {AUD} w3", [], [media[2]])
        )


def test_generate_with_audio_alone_and_text_alone(built, media, capsys):
    _, sound, samples = media
    prompt = f"USER: {AUD} w3 w8 ASSISTANT:"
    expected = built.greedy_text(prompt, [], [samples])
    assert cli_text(built.package, prompt, capsys, "--audio", str(sound)) == expected
    # a prompt without the placeholder gets one in front, as the chat template would put it
    mine = processor_for(built.package, built.family)
    expected = built.greedy_text(mine.with_audio_placeholders("w3 w8", 1), [], [samples])
    assert cli_text(built.package, "w3 w8", capsys, "--audio", str(sound)) == expected
    expected = built.greedy_text("w5 w7 w9", [])
    assert expected  # some text to compare
    assert cli_text(built.package, "w5 w7 w9", capsys) == expected


@pytest.mark.parametrize("built", ["qwen2_5_omni_thinker", "qwen3_omni_moe_thinker"], indirect=True)
def test_f16_audio_graph_runs(built, media):
    """An f16 build's audio graph (its f32 tables cast to the states' type) loads and runs,
    and gives as many features as the processor puts placeholders."""
    package = build_with_cli(built.hf, built.hf.parent / "f16", "--dtype", "f16")
    mine = processor_for(package, built.family)
    inputs = mine(f"USER: {AUD} w3", [], [media[2]])
    session = cpu_session(package / "audio" / "model.onnx")
    feeds = {
        "input_features": inputs["input_features"].astype(np.float16),
        "feature_attention_mask": inputs["feature_attention_mask"],
    }
    (features,) = session.run(None, feeds)
    assert features.dtype == np.float16 and np.isfinite(features).all()
    assert len(features) == (inputs["input_ids"] == mine.token_id(mine.audio_token)).sum()


@pytest.mark.parametrize("built", ["qwen2_5_omni_thinker"], indirect=True)
def test_bad_audio_is_a_one_line_error(built, tmp_path, capsys):
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("not a sound")
    for path, message in (
        (tmp_path / "missing.wav", "no such file"),
        (not_audio, "cannot decode"),
    ):
        capsys.readouterr()
        assert main(["generate", str(built.package), PROMPT, "--audio", str(path)]) == 1
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], lines


def test_audio_for_a_package_that_does_not_hear_is_refused(media, tmp_path, capsys):
    _model_type, make_config, make_processor, *_ = all_cases()["llava-llama"]
    config = make_config()
    make_random_vl_model(config).save_pretrained(tmp_path / "hf")
    make_processor(config).tokenizer.save_pretrained(tmp_path / "hf")
    package = build_with_cli(tmp_path / "hf", tmp_path / "out")
    capsys.readouterr()
    assert main(["generate", str(package), "w5", "--audio", str(media[1])]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "takes no audio" in lines[0], lines


def test_info_names_what_is_built(built, capsys):
    capsys.readouterr()
    assert main(["info", str(built.hf)]) == 0
    out, err = capsys.readouterr()
    # mobius names its classes as transformers does
    assert f"mobius-vision ({built.options['model_class']})" in out, out
    assert "audio-vision-language" in out, out
    whole = not built.family.endswith("_thinker")
    assert ("(speech output) are not built yet" in err) == whole, err
