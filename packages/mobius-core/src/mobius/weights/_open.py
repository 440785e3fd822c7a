"""Which reader opens a model directory's weights: safetensors, or pickles when allowed."""

from __future__ import annotations

import logging
from pathlib import Path

from mobius.errors import CheckpointError
from mobius.weights._pickle import PickleCheckpoint, pickled_files
from mobius.weights._safetensors import SafetensorsCheckpoint

logger = logging.getLogger("mobius")


def open_checkpoint(
    directory: Path, *, allow_pickle: bool = False
) -> SafetensorsCheckpoint | PickleCheckpoint:
    """The weights of a model directory: its safetensors, else its pickled files if allowed.

    Safetensors always win. A directory with only pickled PyTorch weights
    (``pytorch_model.bin``, ``.pt``...) is refused unless ``allow_pickle``: then
    they are read by :class:`~mobius.weights._pickle.PickleCheckpoint`, which
    executes nothing from the file, and a warning is logged.

    Raises:
        CheckpointError: No weights, pickles without ``allow_pickle``, or a
            missing, truncated or corrupt file.
    """
    safetensors = any(directory.glob("*.safetensors")) or any(
        directory.glob("*safetensors.index.json")
    )
    pickled = [] if safetensors else pickled_files(directory)
    if not pickled:
        try:
            return SafetensorsCheckpoint.open(directory)
        except CheckpointError as exc:
            if safetensors:
                raise
            raise CheckpointError(
                f"{exc} (a hub repository with only pickled weights needs --allow-pickle)"
            ) from None
    names = ", ".join(p.name for p in pickled[:3]) + (" ..." if len(pickled) > 3 else "")
    if not allow_pickle:
        raise CheckpointError(
            f"{directory} has only pickled PyTorch weights ({names}), and unpickling can run "
            "code: refused. Convert them to safetensors, or pass --allow-pickle to read them "
            "with mobius's restricted unpickler"
        )
    logger.warning(
        "reading pickled weights (%s) with mobius's restricted unpickler: tensors and plain "
        "containers only, nothing in the file is executed",
        names,
    )
    return PickleCheckpoint.open(directory)
