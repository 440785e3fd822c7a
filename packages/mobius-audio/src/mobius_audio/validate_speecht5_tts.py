"""``mobius build --validate`` for ``text-to-speech`` and ``spectrogram-vocoder`` packages (SpeechT5).

Text to speech: :data:`SAMPLE_TEXTS` through the package's tokenizer, spoken by
seeded random x-vectors with the prenet dropout of :data:`SEED` and at most
:data:`MAXLENRATIO` steps per token; with torch, transformers'
``SpeechT5ForTextToSpeech.generate`` speaks them on the same dropout masks
(:mod:`mobius_audio.testing._speecht5_tts_parity`) and the spectrograms and their
lengths are compared. Vocoder: a seeded random spectrogram batch against
``SpeechT5HifiGan``. Without torch each is a smoke run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mobius.validate import ValidationReport, load_reference, smoke_report

SAMPLE_TEXTS = ("the quick brown fox", "hello")
SEED = 0
MAXLENRATIO = 2.0  # a short check: about one step per token


def validate_text_to_speech(package_dir: Path, source: Path, record: dict, reference: bool):
    """The spectrograms of :data:`SAMPLE_TEXTS` against transformers' on the same dropout."""
    from mobius_audio.speecht5_tts import SpeechT5Speaker, StopRule

    speaker = SpeechT5Speaker(package_dir)
    feeds = speaker.tokenize(list(SAMPLE_TEXTS))
    rng = np.random.default_rng(SEED)
    embeddings = rng.standard_normal((len(SAMPLE_TEXTS), speaker.speaker_embedding_dim))
    embeddings = embeddings.astype(np.float32)
    stop = StopRule(maxlenratio=MAXLENRATIO)
    spectrograms = speaker.spectrograms(feeds, embeddings, np.random.default_rng(SEED), stop)
    checked = (
        f"{len(SAMPLE_TEXTS)} texts ({', '.join(map(repr, SAMPLE_TEXTS))}), random x-vectors "
        f"and dropout of seed {SEED}, maxlenratio {MAXLENRATIO}"
    )
    if not reference:
        return smoke_report(
            "text-to-speech", checked, {"spectrogram": np.concatenate(spectrograms)}
        )
    from mobius_audio.testing._speecht5_tts_parity import speak_with_torch

    model = load_reference("SpeechT5ForTextToSpeech", source)
    expected, lengths = speak_with_torch(model, feeds, embeddings, SEED, stop)
    report = ValidationReport("text-to-speech", "transformers SpeechT5ForTextToSpeech", checked)
    mine = [len(s) for s in spectrograms]
    if mine != lengths:
        report.diffs["spectrogram"] = np.inf
        report.note = f"spectrogram lengths {mine} != transformers' {lengths}"
        return report
    report.diffs["spectrogram"] = max(
        float(np.abs(s - expected[row, : len(s)]).max()) for row, s in enumerate(spectrograms)
    )
    return report


def validate_spectrogram_vocoder(package_dir: Path, source: Path, record: dict, reference: bool):
    """The waveforms of a random spectrogram batch against transformers' ``SpeechT5HifiGan``."""
    import onnxruntime as ort

    session = ort.InferenceSession(
        str(Path(package_dir) / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    mel = session.get_inputs()[0].shape[2]
    spectrogram = np.random.default_rng(SEED).standard_normal((2, 24, mel)).astype(np.float32)
    (waveform,) = session.run(None, {"spectrogram": spectrogram})
    checked = f"a random spectrogram [2, 24, {mel}] of seed {SEED}"
    if not reference:
        return smoke_report("spectrogram-vocoder", checked, {"waveform": waveform})
    import torch

    vocoder = load_reference("SpeechT5HifiGan", source)
    with torch.no_grad():
        expected = vocoder(torch.from_numpy(spectrogram)).numpy()
    report = ValidationReport("spectrogram-vocoder", "transformers SpeechT5HifiGan", checked)
    report.diffs["waveform"] = float(np.abs(waveform - expected).max())
    return report
