"""Which weight files a build reads: each reader notes the files it opens, :func:`track_reads` collects them.

The build record (:mod:`mobius._record`) lists the files a build read with their
SHA-256, whatever source recogniser opened them (a model directory's shards, a
GGUF file, a pipeline's components, a lone adapter): the readers are core's, so
noting the files here covers every source without asking the domain packages.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

_READS: ContextVar[list[Path] | None] = ContextVar("mobius_weight_reads", default=None)


@contextlib.contextmanager
def track_reads() -> Iterator[list[Path]]:
    """Collect, in order and once each, the weight files that readers open inside the block."""
    files: list[Path] = []
    token = _READS.set(files)
    try:
        yield files
    finally:
        _READS.reset(token)


def note_read(path: Path) -> None:
    """Called by a reader that opened ``path`` for weights; nothing happens outside :func:`track_reads`."""
    files = _READS.get()
    if files is not None and path not in files:
        files.append(path)
