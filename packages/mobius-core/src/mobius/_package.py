"""A built model and its files, saved atomically."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import onnx_ir as ir
from tqdm.auto import tqdm

from mobius.errors import OutputError
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
        files = {}
        if self.source_dir is not None and self.source_dir.is_dir():
            for name in AUX_FILES:
                if (self.source_dir / name).is_file():
                    files[name] = self.source_dir / name
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
            OutputError: The output exists (without ``overwrite``) or cannot be written.
        """
        target = check_output(directory, overwrite=overwrite)
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
        for name, model in self.models.items():
            path = staging / f"{name}.onnx"
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
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, staging / name)
        text_files = dict(self.text_files)
        if self.source_dir is not None and self.source_dir.is_dir():
            unfolded = nested_preprocessor_config(self.source_dir)
            if unfolded is not None and "preprocessor_config.json" not in self.extra_files:
                text_files.setdefault("preprocessor_config.json", unfolded)
        for name, text in text_files.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / name).write_text(text, encoding="utf-8")
        for name, data in self.binary_files.items():
            (staging / name).write_bytes(data)


def check_output(directory: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """The absolute output path, refused when it holds anything and ``overwrite`` is false.

    An empty directory is fine. Run it before a long build, so a refusal comes
    first; :meth:`ModelPackage.save` checks again.

    Raises:
        OutputError: The path is a file, or a non-empty directory without ``overwrite``.
    """
    target = Path(directory).absolute()
    if target.is_symlink() or target.exists():
        if not target.is_dir():
            raise OutputError(f"output path exists and is not a directory: {target}")
        if not overwrite and any(target.iterdir()):
            raise OutputError(
                f"output directory {target} is not empty; pass --overwrite to replace it"
            )
    return target


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
