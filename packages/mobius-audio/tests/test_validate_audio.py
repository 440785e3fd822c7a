"""``mobius build --validate`` on mobius-audio's tasks: tiny models pass, broken packages fail.

One tiny random model per task (every parameter perturbed; the parity tests' cases),
its feature extractor saved beside it: a Whisper (one-second window) and a Moonshine
(raw samples, a padding mask the encoder reduces) for speech-to-text, a wav2vec2 CTC
model for audio feature extraction, each built with ``--validate`` through the CLI
against transformers' own ``from_pretrained``. A package whose weight was changed
after the build fails; without torch a smoke inference of the same sample passes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoConfig, Wav2Vec2FeatureExtractor

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import (
    assert_smoke_passes,
    assert_validation_fails,
    broken_copy,
    make_random_seq2seq,
)
from mobius.validate import validate_package
from mobius_audio.testing import make_random_audio_model

#: The bar of these float32 tiny models (the parity tests').
ATOL = 1e-4


def _build(source: Path, out: Path) -> Path:
    assert main(["build", "--model", str(source), str(out), "-q", "--validate"]) == 0
    return out


def _validation(out: Path) -> dict:
    return json.loads((out / "mobius.json").read_text())["validation"]


def _assert_passed(out: Path, reference: str, diffs: set[str], tokens: bool) -> None:
    validation = _validation(out)
    assert validation["passed"] is True, validation
    assert validation["reference"] == reference
    assert set(validation["diffs"]) == diffs
    assert max(validation["diffs"].values()) <= ATOL, validation
    assert validation["tokens_agree"] is (True if tokens else None)
    assert "2 synthetic clips" in validation["checked"]


# -- speech-to-text -------------------------------------------------------------------


@pytest.fixture(scope="module")
def whisper(tmp_path_factory) -> tuple[Path, Path]:
    from _whisper_tiny import WHISPER, feature_extractor

    root = tmp_path_factory.mktemp("whisper")
    config = AutoConfig.for_model("whisper", **WHISPER)
    make_random_seq2seq(config, 0, auto_class="AutoModelForSpeechSeq2Seq").save_pretrained(
        root / "hf"
    )
    feature_extractor(WHISPER["num_mel_bins"]).save_pretrained(root / "hf")
    return root / "hf", _build(root / "hf", root / "out")


SPEECH_DIFFS = {"encoder last_hidden_state", "prefill logits", "decode logits"}


def test_whisper_validates(whisper):
    reference = "transformers WhisperForConditionalGeneration"
    _assert_passed(whisper[1], reference, SPEECH_DIFFS, tokens=True)


def test_whisper_with_a_changed_weight_fails(whisper, tmp_path):
    source, out = whisper
    broken = broken_copy(
        out, tmp_path / "broken", "encoder/model.onnx", "encoder.layer_norm.weight"
    )
    assert_validation_fails(broken, source)


def test_whisper_smoke_run(whisper, monkeypatch, tmp_path):
    summary = assert_smoke_passes(whisper[1], whisper[0], monkeypatch, tmp_path / "copy")
    assert "smoke inference on 2 synthetic clips" in summary


def test_masked_speech_to_text_validates(tmp_path):
    """Moonshine: the encoder's reduced padding mask must equal transformers' too."""
    from test_moonshine_parity import CASES, feature_extractor

    config = AutoConfig.for_model("moonshine", **CASES["moonshine"])
    make_random_seq2seq(config, 0, auto_class="AutoModelForSpeechSeq2Seq").save_pretrained(
        tmp_path / "hf"
    )
    feature_extractor().save_pretrained(tmp_path / "hf")
    out = _build(tmp_path / "hf", tmp_path / "out")
    reference = "transformers MoonshineForConditionalGeneration"
    _assert_passed(out, reference, SPEECH_DIFFS, tokens=True)


def test_speech_source_without_feature_extractor_is_a_one_line_error(whisper, tmp_path):
    source, out = whisper
    bare = shutil.copytree(source, tmp_path / "bare")
    (bare / "preprocessor_config.json").unlink()
    with pytest.raises(MobiusError, match="has no preprocessor_config.json"):
        validate_package(shutil.copytree(out, tmp_path / "copy"), bare)


# -- audio feature extraction ---------------------------------------------------------


@pytest.fixture(scope="module")
def wav2vec2(tmp_path_factory) -> tuple[Path, Path]:
    from audio_encoder_cases.wav2vec2 import WAV2VEC2

    root = tmp_path_factory.mktemp("wav2vec2")
    config = AutoConfig.for_model("wav2vec2", **WAV2VEC2, feat_extract_norm="layer")
    make_random_audio_model(config, "ctc").save_pretrained(root / "hf")
    Wav2Vec2FeatureExtractor(return_attention_mask=True).save_pretrained(root / "hf")
    return root / "hf", _build(root / "hf", root / "out")


def test_audio_encoder_validates(wav2vec2):
    reference = "transformers Wav2Vec2ForCTC"
    _assert_passed(wav2vec2[1], reference, {"last_hidden_state", "logits"}, tokens=False)


def test_audio_encoder_with_a_changed_weight_fails(wav2vec2, tmp_path):
    source, out = wav2vec2
    assert_validation_fails(
        broken_copy(out, tmp_path / "broken", "model.onnx", "lm_head.weight"), source
    )


def test_audio_encoder_smoke_run(wav2vec2, monkeypatch, tmp_path):
    assert_smoke_passes(wav2vec2[1], wav2vec2[0], monkeypatch, tmp_path / "copy")
