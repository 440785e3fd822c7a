"""``mobius build --validate`` for text-to-music packages (the contract: :mod:`mobius.validate`).

The sample is :data:`SAMPLE_TEXTS`, one padded batch through the package's tokenizer,
generated greedily with the package's guidance scale (MusicGen's 3.0) for a few
steps past the delay pattern's start. With torch, transformers' own model
(``from_pretrained``, float32) generates from the same batch with ``do_sample=False``
(:mod:`mobius_audio.testing._music_parity`): the codes must agree and the audio is
compared. Without torch the sample goes through the graphs alone (a smoke run).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mobius.validate import ValidationReport, load_reference, smoke_report

SAMPLE_TEXTS = ("80s pop track with bassy drums and synth", "calm piano")
#: transformers' class of each model type this check reads.
REFERENCE_CLASSES = {
    "musicgen": "MusicgenForConditionalGeneration",
    "musicgen_melody": "MusicgenMelodyForConditionalGeneration",
}


def validate_text_to_music(package_dir: Path, source: Path, record: dict, reference: bool):
    """Greedy codes and audio of :data:`SAMPLE_TEXTS` against transformers' ``generate``."""
    from mobius_audio.music import Sampling, open_music_generator

    model = open_music_generator(package_dir)
    texts = list(SAMPLE_TEXTS)
    per_channel = model.num_codebooks // model.audio_channels
    steps = max(per_channel, 2 * per_channel - 2) + 4
    scale = model.default_guidance_scale()
    checked = (
        f"{len(texts)} texts ({', '.join(repr(t) for t in texts)}), {steps} greedy steps, "
        f"guidance scale {scale}"
    )
    codes = model.generate_codes(texts, steps, scale, Sampling(do_sample=False))
    audio = model.decode_audio(codes)
    if not reference:
        return smoke_report("text-to-music", checked, {"audio_values": audio})
    from mobius_audio.testing._music_parity import transformers_music

    model_type = json.loads((source / "config.json").read_text(encoding="utf-8"))["model_type"]
    torch_model = load_reference(REFERENCE_CLASSES[model_type], source)
    settings = {"max_new_tokens": steps, "guidance_scale": scale or 1.0}
    expected_codes, expected_audio = transformers_music(
        torch_model, model.tokenize(texts), **settings
    )
    report = ValidationReport(
        "text-to-music", f"transformers {type(torch_model).__name__}", checked
    )
    report.tokens_agree = codes.shape == expected_codes.shape and bool(
        np.array_equal(codes, expected_codes)
    )
    if audio.shape == expected_audio.shape:
        report.diffs = {"audio_values": float(np.abs(audio - expected_audio).max())}
    else:
        report.diffs = {"audio_values": np.inf}
        report.note = f"audio shape {audio.shape} != transformers' {expected_audio.shape}"
    return report
