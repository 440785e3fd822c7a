"""What every ``mobius classify`` runner shares: the session, the label names, the ranking.

Domain packages' classifiers (images, zero-shot, audio) score their inputs their own
way and print them alike: one line per input, its ``top`` labels best first::

    cat.png: tabby, tabby cat 0.812345; tiger 0.101234

Labels may hold commas (ImageNet's do), so the pairs are separated by semicolons.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mobius.generate import PackageError, _import_onnxruntime, load_session


def open_session(graph: Path, threads: int | None = None):
    """An ONNX Runtime CPU session of ``graph``; one line of error when it cannot load
    (:func:`mobius.generate.load_session`)."""
    options = _import_onnxruntime().SessionOptions()
    if threads:
        options.intra_op_num_threads = int(threads)
    return load_session(graph, options)


def label_names(config: dict, count: int) -> list[str]:
    """The ``count`` label names of ``config.json``'s ``id2label`` (``LABEL_i`` without one)."""
    id2label = config.get("id2label")
    if id2label is None:
        return [f"LABEL_{i}" for i in range(count)]
    if not isinstance(id2label, dict) or not all(isinstance(v, str) for v in id2label.values()):
        raise PackageError("config.json's id2label must map class ids to label names")
    names = [id2label.get(str(i)) for i in range(count)]
    if len(id2label) != count or None in names:
        raise PackageError(
            f"config.json's id2label names {len(id2label)} labels; the graph scores {count} "
            "(ids 0 to N-1 expected)"
        )
    return names


def softmax(logits: np.ndarray) -> np.ndarray:
    """The softmax over the last axis."""
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def ranked(scores: Sequence[tuple[str, float]], top: int) -> list[tuple[str, float]]:
    """The ``top`` best ``(label, score)`` pairs, best first (ties keep label order)."""
    return sorted(scores, key=lambda pair: -pair[1])[:top]


def format_line(name: str, scores: Sequence[tuple[str, float]]) -> str:
    """``cat.png: tabby, tabby cat 0.812345; tiger 0.101234`` (see the module docstring)."""
    return f"{name}: " + "; ".join(f"{label} {score:.6f}" for label, score in scores)
