"""``mobius build --validate`` for ``transducer`` packages (the contract: :mod:`mobius.validate`).

The sample is two clips of seeded noise (:data:`SAMPLE_SECONDS`) through the package's
numpy feature extractor, padded together. With torch, the source as transformers reads
it (``ParakeetForRNNT`` / ``ParakeetForTDT``, float32) is compared graph by graph
(:mod:`mobius_audio.testing._transducer_parity`: the encoder's states, prediction
network steps with the state carried, the joint's logits), and the greedy tokens of
each clip must equal transformers' ``generate`` (``tokens_agree``). Without torch the
sample is transcribed by the graphs alone (a smoke run).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mobius.errors import MobiusError
from mobius.validate import ValidationReport, load_reference, smoke_report

SAMPLE_SECONDS = (0.5, 0.35)
SEED = 0


def validate_transducer(package_dir: Path, source: Path, record: dict, reference: bool):
    """The three graphs and the greedy tokens of the sample clips against transformers."""
    from mobius_audio.transducer import Transducer

    transducer = Transducer(package_dir)
    rate = transducer.feature_extractor.sampling_rate
    rng = np.random.default_rng(SEED)
    clips = [rng.standard_normal(int(s * rate)).astype(np.float32) * 0.3 for s in SAMPLE_SECONDS]
    checked = (
        f"{len(clips)} clips of seeded noise ({' and '.join(f'{s:g} s' for s in SAMPLE_SECONDS)})"
    )
    if not reference:
        feeds = transducer.features(clips)
        states, _ = transducer.sessions["encoder"].run(None, feeds)
        transducer.transcribe_ids(clips)  # the decoder and joint run too
        return smoke_report("transducer", checked, {"encoder_hidden_states": states})
    from mobius_audio.testing._transducer_parity import compare_transducer

    torch_model = load_reference(_auto_class(source), source)
    result = compare_transducer(torch_model, transducer, clips, SEED)
    report = ValidationReport("transducer", f"transformers {type(torch_model).__name__}", checked)
    report.diffs = result.diffs
    report.tokens_agree = result.tokens == result.expected_tokens
    return report


def _auto_class(source: Path) -> str:
    """transformers' class of the source's ``model_type``."""
    from mobius.generate import _read_json

    kind = _read_json(source / "config.json").get("model_type")
    classes = {"parakeet_rnnt": "ParakeetForRNNT", "parakeet_tdt": "ParakeetForTDT"}
    if kind not in classes:
        raise MobiusError(f"--validate: no transformers transducer class for model_type {kind!r}")
    return classes[kind]
