"""A built model and its files, saved atomically."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import onnx_ir as ir
from tqdm.auto import tqdm

from mobius.errors import OutputError

# Files copied from the source directory next to the graphs.
AUX_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
)


@dataclass
class ModelPackage:
    """The graphs of one build (``{"model": ir.Model}`` or one per component) and their companions."""

    models: dict[str, ir.Model]
    config: object = None
    source_dir: Path | None = None
    task: str = ""
    extra_files: dict[str, Path] = field(default_factory=dict)
    # Companions made in memory (a GGUF file's tokenizer files): name -> text, written last.
    text_files: dict[str, str] = field(default_factory=dict)

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

    def save(self, directory: str | os.PathLike, *, progress: bool = True) -> Path:
        """Write every graph as ``<name>.onnx`` plus ``<name>.onnx.data`` and copy the companion files.

        Everything is written into a temporary directory beside ``directory`` and
        renamed into place at the end, so a failure leaves no partial output and an
        existing ``directory`` is replaced only once the new one is complete.
        """
        target = Path(directory).absolute()
        parent = target.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent))
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
            reason = "disk full" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
            raise OutputError(f"cannot write {target}: {reason}") from None
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return target

    def _write(self, staging: Path, progress: bool) -> None:
        for name, model in self.models.items():
            path = staging / f"{name}.onnx"
            path.parent.mkdir(parents=True, exist_ok=True)
            # Tensors are lazy: each is read from the checkpoint, cast and written in turn.
            with tqdm(
                desc=f"Loading and writing {name} weights", unit="tensor", disable=not progress
            ) as bar:

                def advance(tensor, info, bar=bar) -> None:
                    bar.total = info.total
                    bar.update()

                ir.save(model, path, external_data=f"{path.name}.data", callback=advance)
        for name, source in self.aux_files().items():
            shutil.copyfile(source, staging / name)
        for name, text in self.text_files.items():
            (staging / name).write_text(text, encoding="utf-8")


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
