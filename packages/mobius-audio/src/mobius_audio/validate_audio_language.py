"""``mobius build --validate`` for ``audio-language`` packages (the contract: :mod:`mobius.validate`).

The sample needs no processor, so it serves every speech LLM: one window of seeded
log-mel-like features (uniform in [-1, 1], the window transformers insists on:
``2 * audio_config.max_source_positions`` frames), with a feature mask of its first
60 % where the audio graph takes one; the audio graph says how many tokens they make,
and the prompt is that many placeholders (``audio_token_id``) then a few text ids. With
torch the source as transformers reads it (``AutoModelForMultimodalLM``, float32) gets
the same inputs: the prefill logits, then greedy steps through the cache
(:func:`mobius_audio.testing._audio_language_parity.compare_audio_language`). Without
torch the same sample runs through the graphs alone (a smoke run).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.lora import read_merge_record
from mobius.validate import SAMPLE_DECODE_STEPS, ValidationReport, load_reference, smoke_report
from mobius_audio import glmasr_features, qwen3_asr_features
from mobius_audio.granite_speech_features import validation_audio

SEED = 0
#: The text ids after the audio placeholders.
TEXT_IDS = (5, 6, 7, 8)


#: Families whose audio graph inputs are their own: model_type -> (config, rng) -> inputs.
SAMPLE_AUDIO = {
    "granite_speech": validation_audio,
    "granite_speech_plus": validation_audio,
    "glmasr": glmasr_features.validation_audio,
    "qwen3_asr": qwen3_asr_features.validation_audio,
}


#: Families transformers' AutoModelForMultimodalLM does not map: model_type -> its class.
REFERENCE_CLASS = {
    "audioflamingo3": "AudioFlamingo3ForConditionalGeneration",
    "musicflamingo": "MusicFlamingoForConditionalGeneration",
    "granite_speech_plus": "GraniteSpeechPlusForConditionalGeneration",
}


def _config(package_dir: Path) -> dict:
    from mobius.genai import source_json

    return source_json(package_dir, "config.json")


def _positive(value, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise MobiusError(f"--validate: config.json's {name} is {value!r}, not a positive int")
    return value


def _with_placeholders(config: dict, onnx_model, audio: dict) -> tuple[np.ndarray, dict]:
    """The prompt of as many placeholders as the audio graph makes tokens of ``audio``, then
    :data:`TEXT_IDS`."""
    token = config.get("audio_token_id", config.get("audio_token_index"))
    if not isinstance(token, int) or isinstance(token, bool) or token < 0:
        raise MobiusError(f"--validate: config.json's audio_token_id is {token!r}")
    rows = onnx_model.encoder_features(audio)["audio_features"].shape[0]
    return np.asarray([[token] * rows + [t for t in TEXT_IDS if t != token]], np.int64), audio


def sample(package_dir: Path, onnx_model) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``(input_ids [1, sequence], audio inputs by name)`` of the sample (module docstring)."""
    config = _config(package_dir)
    own = SAMPLE_AUDIO.get(config.get("model_type"))
    if own is not None:  # a family whose audio graph takes something else than a Whisper window
        return _with_placeholders(config, onnx_model, own(config, np.random.default_rng(SEED)))
    audio_config = config.get("audio_config")
    if not isinstance(audio_config, dict):
        raise MobiusError("--validate: config.json has no audio_config")
    frames = 2 * _positive(audio_config.get("max_source_positions"), "max_source_positions")
    mels = _positive(audio_config.get("num_mel_bins"), "audio_config.num_mel_bins")
    token = config.get("audio_token_id", config.get("audio_token_index"))
    if not isinstance(token, int) or isinstance(token, bool) or token < 0:
        raise MobiusError(f"--validate: config.json's audio_token_id is {token!r}")
    rng = np.random.default_rng(SEED)
    audio = {"input_features": rng.uniform(-1, 1, (1, mels, frames)).astype(np.float32)}
    names = {i.name for s in onnx_model.encoders.values() for i in s.get_inputs()}
    for name in ("feature_attention_mask", "input_features_mask"):  # Audio Flamingo's name
        if name in names:
            mask = np.zeros((1, frames), np.int64)
            mask[0, : int(frames * 0.6)] = 1
            audio[name] = mask
    rows = onnx_model.encoder_features(audio)["audio_features"].shape[0]
    text = [t for t in TEXT_IDS if t != token]
    return np.asarray([[token] * rows + text], np.int64), audio


def validate_audio_language(package_dir: Path, source: Path, record: dict, reference: bool):
    """The sample window's prefill, then greedy decode steps (module docstring)."""
    from mobius_audio.audio_language import OnnxAudioLanguage
    from mobius_audio.testing._audio_language_parity import (
        compare_audio_language,
        generate_positions,
    )

    onnx_model = OnnxAudioLanguage(package_dir)
    ids, audio = sample(Path(package_dir), onnx_model)
    mask = np.ones_like(ids)
    checked = (
        f"one window of random log-mel features ({ids.shape[1] - len(TEXT_IDS)} audio tokens), "
        f"a short prompt and {SAMPLE_DECODE_STEPS} greedy decode steps"
    )
    if not reference:
        logits, _ = onnx_model(
            ids, audio, mask, generate_positions(mask), onnx_model.empty_cache(1)
        )
        return smoke_report("audio-language", checked, {"logits": logits})
    auto_class = REFERENCE_CLASS.get(_config(Path(package_dir)).get("model_type"))
    torch_model = load_reference(auto_class or "AutoModelForMultimodalLM", Path(source))
    if read_merge_record(package_dir) and not getattr(torch_model, "_hf_peft_config_loaded", False):
        # transformers loads the adapter only with peft installed, and runs without it else
        raise MobiusError(
            "--validate: the package has the source's LoRA adapter merged, and transformers "
            "loaded the model without it (it needs peft >= 0.22 to load the adapter)"
        )
    result = compare_audio_language(
        torch_model, Path(package_dir), ids, mask, audio, None, SAMPLE_DECODE_STEPS
    )
    report = ValidationReport(
        "audio-language", f"transformers {type(torch_model).__name__}", checked
    )
    report.diffs = {
        "prefill logits": result.prefill_diff,
        "decode logits": max(result.decode_diffs),
    }
    report.tokens_agree = result.tokens_agree
    return report
