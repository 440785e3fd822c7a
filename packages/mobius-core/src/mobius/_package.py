"""A built model and its files, saved atomically."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import onnx_ir as ir
from tqdm.auto import tqdm

try:
    import fcntl
except ImportError:  # Windows: builds into one output are not locked there
    fcntl = None

from mobius.errors import OutputError
from mobius.safe_paths import join_inside
from mobius.weights._resolve import SENTENCEPIECE_FILES

logger = logging.getLogger("mobius")

# What a save leaves beside ``<parent>/<name>`` while it runs: the staging directory
# ``.<name>.mobius-<pid>-<random>.tmp`` and, while swapping out an older output,
# ``.<name>.old-<pid>``. A build killed outright (SIGKILL, power loss) leaves them.
_LEFTOVER = re.compile(r"\.(?P<name>.+)\.(?:mobius-(?P<pid>\d+)-\w+\.tmp|old-(?P<old>\d+))")

# Files copied from the source directory next to the graphs.
AUX_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    *SENTENCEPIECE_FILES,
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "normalizer.json",  # Whisper's English text normaliser (read by its tokenizer)
)


#: Sub-processors of a processor that sees: its settings stay where mobius-vision reads them.
SEEING_PROCESSORS = ("image_processor", "video_processor")


def nested_preprocessor_config(source_dir: Path) -> str | None:
    """``preprocessor_config.json`` for a source whose feature extractor is only nested in
    ``processor_config.json`` (transformers 5's processors save it there), or None.

    The audio runners read ``preprocessor_config.json``. The package never holds the HF
    ``processor_config.json`` itself: onnxruntime-genai reads a file of its own by that
    name (mobius-vision keeps the HF one under another).

    Only the feature extractor of a processor that hears alone is unfolded (mobius-vision
    reads ``preprocessor_config.json`` as the image settings, and a processor that also sees
    from the file it keeps); an unreadable file is left to the runner that needs it.
    """
    if (source_dir / "preprocessor_config.json").is_file():
        return None
    try:
        raw = json.loads((source_dir / "processor_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(raw, dict):
        return None
    nested = raw.get("feature_extractor")
    if not isinstance(nested, dict) or any(k in raw for k in SEEING_PROCESSORS):
        return None
    return json.dumps(nested, indent=2) + "\n"


@dataclass
class ModelPackage:
    """The graphs of one build (``{"model": ir.Model}`` or one per component) and their companions."""

    models: dict[str, ir.Model]
    config: object = None
    source_dir: Path | None = None
    # What the build read: the resolved local directory or file (a hub id's snapshot).
    source_path: Path | None = None
    task: str = ""
    extra_files: dict[str, Path] = field(default_factory=dict)
    # Companions made in memory (a GGUF file's tokenizer files): name -> text, written last.
    text_files: dict[str, str] = field(default_factory=dict)
    # Binary companions made in memory (--adapter-inputs' .onnx_adapter files): name -> bytes.
    binary_files: dict[str, bytes] = field(default_factory=dict)
    # What mobius.build knows of the build (source, options, model types) for mobius.json;
    # see mobius._record. Empty for a package made otherwise (build_from_module).
    record: dict = field(default_factory=dict)
    # The weight files the build read, by their name in the record: hashed on save.
    weight_files: dict[str, Path] = field(default_factory=dict)
    _hashes: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def model(self) -> ir.Model:
        """The single graph of a one-graph package."""
        if len(self.models) != 1:
            raise AttributeError(f"package has several graphs: {sorted(self.models)}")
        return next(iter(self.models.values()))

    def aux_files(self) -> dict[str, Path]:
        """The files copied beside the graphs: their name in the package -> the source file.

        Raises:
            UnsafePathError: a source file is a symlink that leads out of the source folder
                (``tokenizer.json -> ~/.ssh/id_rsa`` would copy that file into the package).
        """
        files = {}
        if self.source_dir is not None and self.source_dir.is_dir():
            for name in AUX_FILES:
                if (self.source_dir / name).is_file():
                    files[name] = join_inside(self.source_dir, name, source=self.source_dir)
        files.update(self.extra_files)
        return files

    def save(
        self, directory: str | os.PathLike, *, progress: bool = True, overwrite: bool = False
    ) -> Path:
        """Write every graph as ``<name>.onnx`` plus ``<name>.onnx.data``, the companion files and ``mobius.json``.

        ``mobius.json`` is the build record (:mod:`mobius._record`): versions, source
        and the SHA-256 of its weight files, options, task, I/O contracts, file sizes.

        Everything is written into a temporary directory beside ``directory`` and
        renamed into place at the end, so a failure (a full disk, Ctrl-C) leaves no
        partial output. A non-empty ``directory`` is refused unless ``overwrite``,
        and then replaced only once the new one is complete. Temporary directories
        that killed builds left beside ``directory`` are removed first.

        Raises:
            OutputError: The output exists (without ``overwrite``), cannot be written,
                would destroy what the build read or the current or home directory (see
                :func:`check_output`), or another build is writing it (see :func:`output_lock`).
        """
        with output_lock(directory):
            target = check_output(directory, overwrite=overwrite, sources=self._sources())
            return self._save_into(target, progress)

    def _sources(self) -> list[Path]:
        """What the build read (its source, weight files and companions from elsewhere)."""
        paths = [self.source_path, self.source_dir, *self.weight_files.values()]
        return [Path(p) for p in (*paths, *self.extra_files.values()) if p is not None]

    def _save_into(self, target: Path, progress: bool) -> Path:
        """:meth:`save` once ``target`` is checked and locked."""
        parent = target.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            remove_leftovers(parent, target.name)
            staging = Path(
                tempfile.mkdtemp(
                    prefix=f".{target.name}.mobius-{os.getpid()}-", suffix=".tmp", dir=parent
                )
            )
            # mkdtemp makes 0700; the renamed output should get the usual umask permissions.
            umask = os.umask(0)
            os.umask(umask)
            staging.chmod(0o777 & ~umask)
        except (FileExistsError, NotADirectoryError):
            raise OutputError(
                f"cannot write to {parent}: a path component is not a directory"
            ) from None
        except OSError as exc:
            raise OutputError(f"cannot write to {parent}: {exc.strerror or exc}") from None
        try:
            self._write(staging, progress)
            _replace_dir(staging, target)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise OutputError(f"cannot write {target}: {_write_failure(exc, parent)}") from None
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return target

    def _write(self, staging: Path, progress: bool) -> None:
        from mobius._record import FileHasher, stamp_producer, write_record

        stamp_producer(self)
        # The weight files are hashed while the graphs are written (see mobius._record).
        hasher = FileHasher(self.weight_files, self._hashes)
        try:
            self._write_files(staging, progress)
            write_record(self, staging, hasher)
        finally:
            hasher.cancel()

    def _write_files(self, staging: Path, progress: bool) -> None:
        # Every name below may come from the source's files (a pipeline's component names):
        # each is joined with the safe join, so none writes outside the staging directory.
        origin = self.source_path or self.source_dir or "the package's file list"

        def inside(name: str) -> Path:
            return join_inside(staging, name, source=origin)

        for name, model in self.models.items():
            path = inside(f"{name}.onnx")
            path.parent.mkdir(parents=True, exist_ok=True)
            # Tensors are lazy: each is read from the checkpoint, cast and written in turn.
            # A bar on a terminal; piped or logged, one plain line per graph instead.
            bar_shown = progress and sys.stderr.isatty()
            with tqdm(
                desc=f"Loading and writing {name} weights", unit="tensor", disable=not bar_shown
            ) as bar:

                def advance(tensor, info, bar=bar) -> None:
                    bar.total = info.total
                    bar.update()

                ir.save(model, path, external_data=f"{path.name}.data", callback=advance)
            if progress and not bar_shown:
                logger.info("wrote %s.onnx (%d tensors)", name, len(model.graph.initializers))
        # A name may hold a folder (a pipeline's ``tokenizer/vocab.json``).
        for name, source in self.aux_files().items():
            target = inside(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            _copy_without_auto_map(source, target, name)
        text_files = dict(self.text_files)
        if self.source_dir is not None and self.source_dir.is_dir():
            unfolded = nested_preprocessor_config(self.source_dir)
            if unfolded is not None and "preprocessor_config.json" not in self.extra_files:
                text_files.setdefault("preprocessor_config.json", unfolded)
        for name, text in text_files.items():
            target = inside(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(_without_auto_map(name, text) or text, encoding="utf-8")
        for name, data in self.binary_files.items():
            target = inside(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


#: Folders of a processor config that hold a sub-processor's own settings (and so may hold
#: its own ``auto_map``): transformers 5 nests them in ``processor_config.json``.
_SUB_PROCESSORS = (*SEEING_PROCESSORS, "feature_extractor", "audio_processor", "tokenizer")


def _without_auto_map(name: str, text: str) -> str | None:
    """``text`` of the JSON file ``name`` without its ``auto_map`` entries, or None when it
    has none (or is not a JSON object: the runner that reads it refuses it then).

    ``auto_map`` names a checkpoint's own Python, which transformers and diffusers import
    when asked to trust remote code. A package never needs it (mobius's runners load no
    remote code), and a copy of it would make the package run that code elsewhere.
    """
    if not name.endswith("config.json") or "auto_map" not in text:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    holders = [data] + [
        value for key, value in data.items() if key in _SUB_PROCESSORS and isinstance(value, dict)
    ]
    if not any("auto_map" in holder for holder in holders):
        return None
    for holder in holders:
        holder.pop("auto_map", None)
    logger.warning(
        "%s: auto_map dropped (it names the checkpoint's own Python code, which mobius never runs)",
        name,
    )
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _copy_without_auto_map(source: Path, target: Path, name: str) -> None:
    """Copy ``source`` to ``target``; a ``*config.json`` loses its ``auto_map`` on the way."""
    if name.endswith("config.json"):
        data = source.read_bytes()
        if b"auto_map" in data:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = None  # not a config a loader reads: copied as it is
            stripped = _without_auto_map(name, text) if text is not None else None
            if stripped is not None:
                target.write_text(stripped, encoding="utf-8")
                return
    shutil.copyfile(source, target)


def check_output(
    directory: str | os.PathLike,
    *,
    overwrite: bool = False,
    sources: Iterable[str | os.PathLike] = (),
) -> Path:
    """The absolute output path, refused when it holds anything and ``overwrite`` is false.

    An empty directory is fine. A non-empty one is also refused, even with ``overwrite``,
    when replacing it would destroy what it must not: one of ``sources`` (the model, a
    weight file, an adapter: what the build reads), a folder that holds one or lies inside
    one, a file that a source links to (a hub snapshot's blobs), the current directory, the
    home directory, or a folder that holds either (``/``). Paths are compared resolved, so a
    symlink to the source counts as the source. Run it before a long build, so a refusal
    comes first; :meth:`ModelPackage.save` checks again.

    Raises:
        OutputError: The path is a file, a non-empty directory without ``overwrite``, or one
            that must never be replaced.
    """
    target = Path(directory).absolute()
    if target.is_symlink() or target.exists():
        if not target.is_dir():
            raise OutputError(f"output path exists and is not a directory: {target}")
        if any(target.iterdir()):
            _refuse_irreplaceable(target, sources)
            if not overwrite:
                raise OutputError(
                    f"output directory {target} is not empty; pass --overwrite to replace it"
                )
    return target


# At most this many entries of a source folder are looked at for links (a hub snapshot
# holds a few dozen); a mistaken ``--model ~`` must not walk the whole home directory.
_MAX_LINKS_LOOKED_AT = 10_000


def _refuse_irreplaceable(target: Path, sources: Iterable[str | os.PathLike]) -> None:
    """Raise :class:`OutputError` when replacing the non-empty ``target`` destroys a source
    or the current or home directory (see :func:`check_output`)."""
    real = Path(os.path.realpath(target))
    again = "; give another output directory"
    if real.parent == real:
        raise OutputError(f"output directory {target} is the root directory{again}")
    for given in sources:
        source = Path(given).absolute()
        source_real = Path(os.path.realpath(source))
        if real == source_real:
            raise OutputError(f"output directory {target} is the source {source}{again}")
        if real in source_real.parents:
            raise OutputError(f"output directory {target} holds the source {source}{again}")
        if source_real in real.parents:
            raise OutputError(f"output directory {target} lies inside the source {source}{again}")
        for linked in _linked_files(source_real):
            if real == linked or real in linked.parents:
                raise OutputError(
                    f"output directory {target} holds {linked}, a file of the source "
                    f"{source}{again}"
                )
    places = []
    with contextlib.suppress(OSError):  # a current directory removed meanwhile has no path
        places.append((Path.cwd(), "the current directory"))
    with contextlib.suppress(RuntimeError, KeyError):  # the home as ``~`` names it ($HOME)
        places.append((Path.home(), "the home directory"))
    for place, what in places:
        place_real = Path(os.path.realpath(place))
        if real == place_real:
            raise OutputError(f"output directory {target} is {what}{again}")
        if real in place_real.parents:
            raise OutputError(f"output directory {target} holds {what} {place}{again}")


def _linked_files(source: Path) -> list[Path]:
    """Where the symlinks in the folder ``source`` (and its subfolders) lead, resolved.

    A hub snapshot's files are links into the repository's ``blobs/``; a folder that holds
    such a target holds part of the source. Two levels cover a pipeline's component folders.
    """
    if not source.is_dir():
        return []
    found, looked_at = [], 0
    folders = [(source, 0)]
    while folders:
        folder, depth = folders.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries:
            looked_at += 1
            if looked_at > _MAX_LINKS_LOOKED_AT:
                return found
            if entry.is_symlink():
                found.append(Path(os.path.realpath(entry.path)))
            elif depth < 1 and entry.is_dir(follow_symlinks=False):
                folders.append((Path(entry.path), depth + 1))
    return found


def _write_failure(exc: OSError, parent: Path) -> str:
    """Why a write failed, in words; a short write on a full device reads "disk full".

    numpy's ``tofile`` reports a short write without an errno ("2048 requested and
    0 written"), so the device's free space decides then.
    """
    if exc.errno == errno.ENOSPC:
        return "disk full"
    if exc.errno is None:
        with contextlib.suppress(OSError):
            if shutil.disk_usage(parent).free < 16 << 20:
                return "disk full"
    return exc.strerror or str(exc)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_leftovers(parent: Path, name: str) -> list[Path]:
    """Remove the temporary directories that killed builds of ``parent/name`` left behind.

    A leftover whose process is gone is deleted (and logged); one whose process
    still runs belongs to a build in progress and is named in the log instead.
    Returns the removed paths.
    """
    removed = []
    for path in sorted(parent.glob(f".{glob_escape(name)}.*")):
        match = _LEFTOVER.fullmatch(path.name)
        if match is None or match["name"] != name or not path.is_dir():
            continue
        pid = int(match["pid"] or match["old"])
        if pid == os.getpid():
            continue
        if _alive(pid):
            logger.warning("another build (process %d) is writing %s", pid, path)
            continue
        shutil.rmtree(path, ignore_errors=True)
        logger.warning("removed %s, left by an interrupted build (process %d)", path, pid)
        removed.append(path)
    return removed


def glob_escape(text: str) -> str:
    """``text`` with glob metacharacters escaped."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def _replace_dir(staging: Path, target: Path) -> None:
    """Rename ``staging`` to ``target``, swapping out an existing ``target`` only after success."""
    if not target.exists():
        staging.rename(target)
        return
    if not target.is_dir():
        raise OutputError(f"output path exists and is not a directory: {target}")
    backup = target.with_name(f".{target.name}.old-{os.getpid()}")
    target.rename(backup)
    try:
        staging.rename(target)
    except OSError:
        with contextlib.suppress(OSError):
            backup.rename(target)
        raise
    shutil.rmtree(backup, ignore_errors=True)


# Builds into one output take this lock beside it (not inside: the output is replaced).
_LOCK_SUFFIX = ".mobius-lock"
# The locks this process holds: lock file -> [descriptor, depth, thread], so that
# ``mobius build``'s lock covers the ``save`` inside it.
_held: dict[Path, list] = {}
_held_guard = threading.Lock()


@contextlib.contextmanager
def output_lock(directory: str | os.PathLike) -> Iterator[Path]:
    """Hold the exclusive lock of builds into ``directory``; yields its absolute path.

    The lock is a ``flock`` on ``.<name>.mobius-lock`` beside the output: a second build
    into the same output, in another process or thread, is refused at once naming the
    holder's pid. The kernel drops the lock of a process that dies however it dies, so a
    lock file left by a killed build is simply taken over. On release the lock file is
    removed, and so are the parent folders the lock had to create if they are still empty.
    The same thread may take it again inside (``mobius build`` holds it around ``save``).

    Raises:
        OutputError: Another build holds the lock, or the lock file cannot be made.
    """
    target = Path(directory).absolute()
    created = _make_parents(target.parent)
    try:
        # One lock however the output is spelled (``out``, ``./x/../out``, through links).
        real = Path(os.path.realpath(target))
        if real.parent == real:
            raise OutputError(f"output directory {target} is the root directory")
        path = real.parent / f".{real.name}{_LOCK_SUFFIX}"
        with _held_guard:
            held = _held.get(path)
            if held is not None and held[2] != threading.get_ident():
                raise OutputError(f"another mobius build is writing {target} (pid {os.getpid()})")
            if held is None:
                _held[path] = [_acquire(path, target), 0, threading.get_ident()]
            _held[path][1] += 1
        try:
            yield target
        finally:
            with _held_guard:
                _held[path][1] -= 1
                if _held[path][1] == 0:
                    _release(path, _held.pop(path)[0])
    finally:
        for folder in reversed(created):  # deepest first; one holding the output stays
            with contextlib.suppress(OSError):
                folder.rmdir()


def _make_parents(parent: Path) -> list[Path]:
    """Create ``parent`` and its missing ancestors; returns those created, outermost first."""
    missing = [folder for folder in (parent, *parent.parents) if not folder.exists()][::-1]
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise OutputError(
            f"cannot write to {parent}: a path component is not a directory"
        ) from None
    except OSError as exc:
        raise OutputError(f"cannot write to {parent}: {exc.strerror or exc}") from None
    return missing


def _acquire(path: Path, target: Path) -> int | None:
    """The open, locked lock file ``path`` (None where locks are unsupported)."""
    if fcntl is None:
        return None
    for _ in range(100):
        try:
            # No symlink followed: a planted link must not make mobius truncate its target.
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror or exc
            raise OutputError(f"cannot write the lock file {path}: {why}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or socket planted in its place
            os.close(fd)
            raise OutputError(f"cannot write the lock file {path}: it is not a regular file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            pid = f" (pid {holder})" if holder else ""
            raise OutputError(f"another mobius build is writing {target}{pid}") from None
        except OSError as exc:  # a file system without locks: build unlocked, as before
            logger.warning("cannot lock %s (%s): builds into it are not locked", path, exc)
            os.close(fd)
            return None
        # The previous holder may have removed the file after it was opened here: the lock
        # counts only on the file that is still at ``path``.
        if _same_file(path, fd):
            with contextlib.suppress(OSError):  # the pid only names the holder (a full disk)
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        os.close(fd)
    raise OutputError(f"another mobius build is writing {target}")


def _same_file(path: Path, fd: int) -> bool:
    try:
        on_disk = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    opened = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (opened.st_dev, opened.st_ino)


def _read_pid(fd: int) -> int | None:
    """The pid its holder wrote into the lock file, if it has yet."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def _release(path: Path, fd: int | None) -> None:
    """Remove the lock file while still holding it, then let go."""
    if fd is None:
        return
    try:
        if _same_file(path, fd):
            with contextlib.suppress(OSError):
                path.unlink()
    finally:
        os.close(fd)
