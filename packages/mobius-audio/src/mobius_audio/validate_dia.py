"""``mobius build --validate`` for ``text-to-dialogue`` packages (Dia; the contract: :mod:`mobius.validate`).

The sample is :data:`SAMPLE_TEXTS`, right-padded bytes as the runner tokenizes them.
With torch, transformers' ``DiaForConditionalGeneration`` (``from_pretrained``,
float32) reads the same batch: the encoder's states, the decoder's logits over a
prefill of seeded random codes and cached steps, and its cache are compared
(:func:`mobius_audio.testing._dia_parity.compare_dia`). Without torch the sample
goes through the encoder and one decoder step alone (a smoke run).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mobius.classification import open_session
from mobius.validate import ValidationReport, load_reference, smoke_report

SAMPLE_TEXTS = ("[S1] Hello there. [S2] Hi!", "[S1] Yes.")


def validate_text_to_dialogue(package_dir: Path, source: Path, record: dict, reference: bool):
    """The sample's states and logits against transformers' (or a smoke run)."""
    from mobius_audio.dia_generate import DiaPackage, first_decoder_feeds, run_named, text_batch

    encoder, decoder = (open_session(package_dir / g / "model.onnx") for g in ("encoder", "decoder"))  # fmt: skip
    config = DiaPackage(package_dir)
    ids, mask = text_batch(list(SAMPLE_TEXTS), config.max_text)
    checked = f"{len(SAMPLE_TEXTS)} texts, a 4-frame prefill of seeded codes and 4 cached steps"
    if not reference:
        encoded = run_named(encoder, {"input_ids": ids, "attention_mask": mask})
        bos = np.full((len(ids), 1, config.channels), config.bos, np.int64)
        step = run_named(decoder, {**first_decoder_feeds(decoder, encoded, mask), "input_ids": bos})
        return smoke_report("text-to-dialogue", checked, {**encoded, "logits": step["logits"]})
    from mobius_audio.testing._dia_parity import compare_dia

    torch_model = load_reference("DiaForConditionalGeneration", source)
    result = compare_dia(torch_model, encoder, decoder, ids, mask)
    report = ValidationReport(
        "text-to-dialogue", f"transformers {type(torch_model).__name__}", checked
    )
    report.diffs = result.diffs
    return report
