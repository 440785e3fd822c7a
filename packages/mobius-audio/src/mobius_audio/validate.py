"""``mobius build --validate`` for mobius-audio's tasks (the contract: :mod:`mobius.validate`).

The sample is two synthetic clips (:data:`SAMPLE_SECONDS`: a seeded tone plus noise,
:func:`mobius_audio.testing._speech_parity.random_audio`) through the model's feature
extractor (the source's ``preprocessor_config.json``, on its numpy path as the runner
uses it), padded to the longer with its attention mask where the model takes one.
With torch, the source as transformers reads it (``from_pretrained``, float32) gets the
same inputs, through the parity kit's compare functions (:mod:`mobius_audio.testing`):

- ``speech-to-text``: the encoder's states (and reduced mask), then the decoder's
  prefill of its start token and greedy steps through both caches;
- ``audio-feature-extraction``: every output of the graph (frame features, CTC or
  utterance logits).

Without torch the same sample goes through the graphs alone (a smoke run).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.validate import SAMPLE_DECODE_STEPS, ValidationReport, load_reference, smoke_report

#: The sample clips' lengths in seconds (each cut to the extractor's window, if shorter).
SAMPLE_SECONDS = (1.0, 1.5)
#: The seed of the sample's noise.
SEED = 0


def _feature_extractor(source: Path, required: bool = True):
    """The source's feature extractor as transformers reads it; None where the source has
    none and ``required`` is False."""
    if not (source / "preprocessor_config.json").is_file():
        if not required:
            return None
        raise MobiusError(
            f"--validate: {source} has no preprocessor_config.json: the sample audio needs "
            "the model's feature extractor"
        )
    from mobius_audio.encoders import numpy_feature_extractor

    numpy_extractor = numpy_feature_extractor(source)  # where transformers' class needs torch
    if numpy_extractor is not None:
        return numpy_extractor
    from transformers import AutoFeatureExtractor

    try:
        return AutoFeatureExtractor.from_pretrained(str(source), trust_remote_code=False)
    except Exception as exc:  # the loader's refusal, in one line
        raise MobiusError(
            f"--validate: transformers cannot load the feature extractor of {source}: "
            f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        ) from None


def _sample_waves(extractor) -> tuple[list[np.ndarray], int]:
    """The sample clips at the extractor's rate (none longer than its window, where it has one)."""
    from mobius_audio.testing._speech_parity import random_audio

    rate = getattr(extractor, "sampling_rate", None)
    if not isinstance(rate, int) or isinstance(rate, bool) or not 1000 <= rate <= 192_000:
        raise MobiusError(f"--validate: the feature extractor's sampling_rate is {rate!r}")
    window = getattr(extractor, "n_samples", None)  # Whisper's 30 s (or shorter) window
    seconds = SAMPLE_SECONDS
    if isinstance(window, int) and window > 0:
        seconds = tuple(min(s, window / rate) for s in seconds)
    return random_audio(seconds, rate, SEED), rate


def _checked(waves: list[np.ndarray], rate: int, extra: str = "") -> str:
    lengths = " and ".join(f"{len(w) / rate:g} s" for w in waves)
    return f"{len(waves)} synthetic clips ({lengths}: a tone and seeded noise){extra}"


# -- speech-to-text -------------------------------------------------------------------


def validate_speech_to_text(package_dir: Path, source: Path, record: dict, reference: bool):
    """Encode the sample clips; prefill the decoder start token, then greedy steps."""
    from mobius.genai import source_json
    from mobius_audio.generate import SOURCES, extract_inputs
    from mobius_audio.testing._speech_parity import OnnxSpeechToText, compare_speech_to_text

    onnx_model = OnnxSpeechToText(package_dir)
    name = next((n for n in SOURCES if n in onnx_model.encoder_names), None)
    if name is None:
        raise MobiusError(f"--validate: {package_dir}'s encoder takes no audio ({SOURCES})")
    start = source_json(package_dir, "config.json").get("decoder_start_token_id")
    if not isinstance(start, int) or isinstance(start, bool) or start < 0:
        raise MobiusError(f"--validate: config.json's decoder_start_token_id is {start!r}")
    extractor = _feature_extractor(source)
    waves, rate = _sample_waves(extractor)
    inputs = extract_inputs(extractor, waves, rate, name, mask=onnx_model.masked)
    checked = _checked(
        waves, rate, f", the start token and {SAMPLE_DECODE_STEPS} greedy decode steps"
    )
    if not reference:
        return smoke_report("speech-to-text", checked, _greedy(onnx_model, inputs, start))
    torch_model = load_reference(
        "AutoModelForSpeechSeq2Seq", source, attn_implementation=_reference_attention(record)
    )
    result = compare_speech_to_text(
        torch_model, onnx_model, inputs, [start], SAMPLE_DECODE_STEPS, False
    )
    report = ValidationReport(
        "speech-to-text", f"transformers {type(torch_model).__name__}", checked
    )
    report.diffs = {
        "encoder last_hidden_state": result.encoder_diff,
        "prefill logits": result.prefill_diff,
        "decode logits": max(result.decode_diffs),
    }
    report.tokens_agree = result.onnx_tokens == result.torch_tokens
    return report


def _reference_attention(record: dict) -> str:
    """The attention transformers' reference runs with: what the built family asks for
    (``reference_attention`` on its module class), else eager."""
    from mobius import registry

    for row in record.get("models") or []:
        key = row.get("model_type") if isinstance(row, dict) else None
        if isinstance(key, str) and key in registry:
            return getattr(registry.get(key).module_class(), "reference_attention", "eager")
    return "eager"


def _greedy(onnx_model, inputs: dict[str, np.ndarray], start: int) -> dict[str, np.ndarray]:
    """The smoke run: encode, prefill the start token, then greedy steps; every output."""
    hidden, cross, mask = onnx_model.encode(inputs)
    ids = np.full((len(hidden), 1), start, np.int64)
    cache = onnx_model.empty_cache(len(hidden))
    outputs = {"encoder last_hidden_state": hidden}
    for step in range(SAMPLE_DECODE_STEPS + 1):
        logits, cache = onnx_model.decode(ids, mask, cross, cache)
        outputs["prefill logits" if step == 0 else f"decode {step} logits"] = logits
        ids = logits[:, -1].argmax(-1)[:, None].astype(np.int64)
    return outputs


# -- audio feature extraction ---------------------------------------------------------


def validate_audio_feature_extraction(
    package_dir: Path, source: Path, record: dict, reference: bool
):
    """Every output of the encoder on the sample clips (with the extractor's mask, if any)."""
    import onnxruntime as ort

    from mobius_audio.generate import extract_inputs
    from mobius_audio.testing._audio_parity import _AUTO_CLASSES, compare_audio

    session = ort.InferenceSession(
        str(package_dir / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    name = session.get_inputs()[0].name  # input_values, or a module's declared features
    extractor = _feature_extractor(source, required=False) or _default_extractor(name)
    waves, rate = _sample_waves(extractor)
    masked = bool(getattr(extractor, "return_attention_mask", False))
    features = extract_inputs(extractor, waves, rate, name, mask=masked)
    checked = _checked(waves, rate)
    if not reference:
        feeds = dict(features)
        if len(session.get_inputs()) > 1:  # AST's fixed window takes no mask
            feeds.setdefault("attention_mask", np.ones(features[name].shape[:2], np.int64))
        outputs = session.run(None, feeds)
        named = dict(zip([o.name for o in session.get_outputs()], outputs, strict=True))
        return smoke_report("audio-feature-extraction", checked, named)
    torch_model = load_reference(_AUTO_CLASSES[_built_head(session, package_dir)], source)
    report = ValidationReport(
        "audio-feature-extraction", f"transformers {type(torch_model).__name__}", checked
    )
    report.diffs = compare_audio(torch_model, session, features)
    return report


def _default_extractor(name: str):
    """transformers' default extractor for a source with none: normalised waveforms with a
    mask for ``input_values``, SeamlessM4T's stacked fbank frames for ``input_features``."""
    from transformers import SeamlessM4TFeatureExtractor, Wav2Vec2FeatureExtractor

    if name == "input_features":
        return SeamlessM4TFeatureExtractor()
    return Wav2Vec2FeatureExtractor(do_normalize=True, return_attention_mask=True)


def _built_head(session, package_dir: Path) -> str:
    """The graph's head from its outputs, and its ``config.json`` for frame vs CTC logits."""
    from mobius.generate import _read_json
    from mobius_audio.heads import graph_head

    ranks = {o.name: len(o.shape) for o in session.get_outputs()}
    return graph_head(ranks, _read_json(package_dir / "config.json").get("architectures"))


# -- zero-shot audio classification (CLAP) ------------------------------------------------

#: The sample label texts' token lengths (right-padded together).
SAMPLE_TEXT_LENGTHS = (6, 4)


def validate_zero_shot_audio(package_dir: Path, source: Path, record: dict, reference: bool):
    """Both embeddings and both logits of the sample clips against two random token texts.

    The features come from the package's extractor in numpy
    (:class:`mobius_audio.clap_features.ClapFeatures`, equal to transformers' within 1e-5);
    the clips are cut to its window so that no random crop is drawn.
    """
    import onnxruntime as ort

    from mobius.generate import _read_json
    from mobius.testing import right_padded_batch
    from mobius_audio.clap_features import ClapFeatures
    from mobius_audio.testing._clap_parity import compare_clap
    from mobius_audio.testing._speech_parity import random_audio

    features = ClapFeatures.from_package(package_dir)
    rate, window = features.sampling_rate, features.max_samples / features.sampling_rate
    waves = random_audio(tuple(min(s, window) for s in SAMPLE_SECONDS), rate, SEED)
    text = _read_json(package_dir / "config.json").get("text_config") or {}
    vocab, pad = text.get("vocab_size"), text.get("pad_token_id")
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab <= 4:
        raise MobiusError(f"--validate: config.json's text_config.vocab_size is {vocab!r}")
    if not isinstance(pad, int) or isinstance(pad, bool) or not 0 <= pad < vocab:
        raise MobiusError(f"--validate: config.json's text_config.pad_token_id is {pad!r}")
    ids, mask, _ = right_padded_batch(list(SAMPLE_TEXT_LENGTHS), vocab, 0, SEED, None, pad)
    feeds = {"input_ids": ids, "attention_mask": mask, **features(waves)}
    session = ort.InferenceSession(
        str(package_dir / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    checked = _checked(waves, rate, f" and {len(SAMPLE_TEXT_LENGTHS)} texts of random tokens")
    if not reference:
        names = [o.name for o in session.get_outputs()]
        outputs = dict(zip(names, session.run(None, feeds), strict=True))
        return smoke_report("zero-shot-audio-classification", checked, outputs)
    torch_model = load_reference("ClapModel", source)
    report = ValidationReport(
        "zero-shot-audio-classification", f"transformers {type(torch_model).__name__}", checked
    )
    report.diffs = compare_clap(torch_model, session, feeds)
    return report
