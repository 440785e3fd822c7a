"""``mobius build --validate`` for ``text-to-audio`` packages (the contract: :mod:`mobius.validate`).

The sample is :data:`SAMPLE_TEXTS`, one batch through the package's own tokenizer,
with the noise of :data:`SEED` drawn as the runner draws it (speaker 0 of a
multi-speaker model). With torch, transformers' ``VitsModel`` (``from_pretrained``,
float32) speaks the same batch on the same noise (:mod:`mobius_audio.testing._tts_parity`):
the padded waveforms are compared, and the clip lengths must agree. Without torch
the sample goes through the graphs alone (a smoke run).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mobius.validate import ValidationReport, load_reference, smoke_report

SAMPLE_TEXTS = ("the quick brown fox", "hello")
SEED = 0


def validate_text_to_audio(package_dir: Path, source: Path, record: dict, reference: bool):
    """The waveform of :data:`SAMPLE_TEXTS` against transformers' on the same noise."""
    from mobius_audio.tts import TextToAudio, tokenize

    model = TextToAudio(package_dir)
    texts = list(SAMPLE_TEXTS)
    checked = f"{len(texts)} texts ({', '.join(repr(t) for t in texts)}), noise of seed {SEED}"
    if not reference:
        feeds = tokenize(model.tokenizer, texts)
        feeds.update(model.speaker_feeds(None, len(texts)))
        waveform, _ = model.run_batch(feeds, np.random.default_rng(SEED))
        return smoke_report("text-to-audio", checked, {"waveform": waveform})
    from mobius_audio.testing._tts_parity import compare_tts

    torch_model = load_reference("VitsModel", source)
    result = compare_tts(torch_model, model, texts, SEED)
    report = ValidationReport(
        "text-to-audio", f"transformers {type(torch_model).__name__}", checked
    )
    report.diffs = dict(result.diffs)
    if result.lengths != result.expected_lengths:
        report.diffs["waveform"] = np.inf
        report.note = f"clip lengths {result.lengths} != transformers' {result.expected_lengths}"
    return report
