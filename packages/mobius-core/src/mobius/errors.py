"""The errors mobius raises on bad input.

Every error a user can cause derives from :class:`MobiusError`; the CLI prints
its message on one line and exits non-zero, with no traceback.
"""

from __future__ import annotations


class MobiusError(Exception):
    """Base class of every error caused by the user's input or environment."""


class UnknownModelTypeError(MobiusError, KeyError):
    """No registered architecture matches the requested model type."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ModelSourceError(MobiusError):
    """The model id or directory cannot be resolved, or its config is unreadable."""


class ConfigError(ModelSourceError):
    """The config asks for something mobius cannot build: a malformed value, or an option
    (such as a rope type) that mobius does not implement. Refused, never approximated."""


class CheckpointError(MobiusError):
    """A checkpoint file is missing, truncated or corrupt."""


class UnsafePathError(CheckpointError):
    """A file name read from a checkpoint, pipeline or package would lead outside its folder:
    absolute, with a ``..`` segment, or through a symlink that leaves it (see
    :mod:`mobius.safe_paths`)."""


class WeightMismatchError(MobiusError):
    """The checkpoint does not fit the graph: missing, unexpected, wrong-shape or wrong-dtype tensors."""


class OutputError(MobiusError):
    """The output directory cannot be written."""


class ChatTemplateError(MobiusError):
    """A tokenizer's chat template refuses the conversation (its own ``raise_exception``), fails,
    or goes over the time or size limits it is rendered with (see :mod:`mobius.chat_template`)."""
