"""The one safe way to turn a file name read from a file into a path.

Checkpoints, pipelines and packages name other files: an index names its shards, a
``model_index.json`` its component folders, a package its graphs and tokenizer files.
Such a name is a stranger's text. Joined as it is, ``/etc/passwd`` or ``../victim``
would make mobius read, or write, outside the folder it was given. Every such name goes
through :func:`join_inside`.

The rule for the text is huggingface_hub's for repo file names: no ``..`` segment (split
on ``/`` or ``\\``), and no name that is anchored under POSIX or Windows rules (``/x``,
``C:\\x``, ``C:x``, ``\\\\host\\share``), checked the same on every platform. A name the hub
refuses is refused here; beyond the hub's rule mobius refuses only an empty name, a NUL,
a name that is the folder itself, and a name whose symlinks lead out of the folder.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath

from mobius.errors import UnsafePathError

__all__ = ["check_name", "join_inside"]

#: At most this many characters of a refused name go into the error (it is one line).
_SHOWN = 120


def _shown(name: str) -> str:
    text = repr(name)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 5] + "...'"


def _refuse(name: str, source: str | os.PathLike[str], reason: str) -> UnsafePathError:
    return UnsafePathError(
        f"{source}: unsafe file name {_shown(name)}: {reason}; mobius reads and writes only "
        "files inside the folder that holds it"
    )


def check_name(name: object, *, source: str | os.PathLike[str]) -> str:
    """Return ``name`` when its text is a safe relative file name, else raise.

    Safe means: a non-empty string without NUL, with no ``..`` segment whether split
    on ``/`` or on ``\\``, and not absolute, drive-relative or UNC under either POSIX or
    Windows rules (huggingface_hub's rule for repo file names). ``source`` is the file
    the name was read from; the error names it. This checks the text only; use
    :func:`join_inside` to also follow symlinks.

    Raises:
        UnsafePathError: ``name`` is not such a name (one line, naming ``source``).
    """
    if not isinstance(name, str):
        raise UnsafePathError(
            f"{source}: a file name must be a string, not {type(name).__name__} "
            f"({_shown(str(name))})"
        )
    if not name:
        raise _refuse(name, source, "it is empty")
    if "\0" in name:
        raise _refuse(name, source, "it holds a NUL character")
    if ".." in name.replace("\\", "/").split("/"):
        raise _refuse(name, source, "it has a '..' segment")
    # os.path.join on Windows treats each '/'-separated part on its own: check each one.
    pure_paths = [PurePosixPath(name), *(PureWindowsPath(part) for part in name.split("/"))]
    if any(path.drive or path.root for path in pure_paths):
        raise _refuse(name, source, "it is an absolute, drive or UNC path")
    return name


def _allowed_folders(real_root: str) -> list[str]:
    """Where a file under ``real_root`` may really be: the folder itself and, when the folder
    lies in a huggingface_hub cache snapshot, that repo's ``blobs`` folder (the hub stores each
    snapshot file as a symlink to ``../../blobs/<hash>``)."""
    folders = [real_root]
    root = Path(real_root)
    for folder in (root, *root.parents):
        if folder.parent.name == "snapshots":
            blobs = folder.parent.parent / "blobs"
            if blobs.is_dir():
                folders.append(os.path.realpath(blobs))
            break
    return folders


def join_inside(
    root: str | os.PathLike[str], name: object, *, source: str | os.PathLike[str]
) -> Path:
    """``root / name``, for a ``name`` read from a file, when it stays inside ``root``.

    ``name`` must pass :func:`check_name`, and the path it makes, with every symlink
    followed, must lie strictly inside ``root`` (itself resolved), or in the ``blobs``
    folder of the hub cache repo whose snapshot ``root`` is. The returned path is the
    plain join (symlinks left as they are), so messages show the names the user knows.

    Raises:
        UnsafePathError: ``name`` is unsafe or leads outside ``root``; the one-line
            message names ``name`` and ``source``, the file it was read from.
    """
    check_name(name, source=source)
    path = Path(root) / name
    try:
        real_root = os.path.realpath(root)
        real = os.path.realpath(path)
    except (OSError, ValueError) as exc:  # a name too long for the OS, say
        raise _refuse(name, source, f"it cannot be resolved ({exc})") from None
    if real == real_root:
        raise _refuse(name, source, "it names the folder itself")
    for folder in _allowed_folders(real_root):
        if os.path.commonpath([real, folder]) == folder:
            return path
    raise _refuse(name, source, f"it leads outside {root} (through a symlink)")
