"""A restricted reader of PyTorch's pickled checkpoints (``pytorch_model.bin``, ``.pt``), without torch.

Unpickling runs whatever code a file names, so mobius refuses pickled checkpoints
unless the user opts in (``--allow-pickle``). Even then nothing from the file is
executed: this reader resolves only the names a state dict is made of (the tensor
and parameter rebuilds, the storage types, ``OrderedDict``) to its own functions,
and refuses every other name before anything is called.

The file is PyTorch's zip format (``torch.save`` since 1.6): ``<archive>/data.pkl``
holds the state dict, with each storage a persistent id ``("storage", type, key,
location, numel)`` whose bytes are the entry ``<archive>/data/<key>``. Tensors are
lazy: a storage's bytes are read from the zip when a tensor of it is used.
"""

from __future__ import annotations

import collections
import json
import os
import pickle
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx_ir as ir

from mobius.errors import CheckpointError
from mobius.safe_paths import join_inside
from mobius.weights._closing import Closing
from mobius.weights._tracking import note_read

#: File names that hold pickled weights (a directory with only these is refused by default).
PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.ckpt")

_STORAGES: dict[str, np.dtype] = {
    "FloatStorage": np.dtype("<f4"),
    "DoubleStorage": np.dtype("<f8"),
    "HalfStorage": np.dtype("<f2"),
    "BFloat16Storage": np.dtype(ml_dtypes.bfloat16),
    "LongStorage": np.dtype("<i8"),
    "IntStorage": np.dtype("<i4"),
    "ShortStorage": np.dtype("<i2"),
    "CharStorage": np.dtype("i1"),
    "ByteStorage": np.dtype("u1"),
    "BoolStorage": np.dtype(np.bool_),
}


class _StorageType:
    """What a pickled ``torch.<X>Storage`` name resolves to: just its element type."""

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype


class _Storage:
    """One storage of the archive: ``numel`` elements of ``dtype`` in a zip entry."""

    def __init__(self, archive: _Archive, entry: str, dtype: np.dtype, numel: int) -> None:
        self.archive, self.entry, self.dtype, self.numel = archive, entry, dtype, numel

    def array(self) -> np.ndarray:
        data = self.archive.read(self.entry)
        if len(data) != self.numel * self.dtype.itemsize:
            raise CheckpointError(
                f"{self.archive.path}: storage {self.entry} holds {len(data)} bytes, "
                f"not {self.numel} x {self.dtype.itemsize}"
            )
        return np.frombuffer(data, dtype=self.dtype)


class PickledTensor:
    """A tensor of a pickled checkpoint: a strided view of a storage, read on demand."""

    def __init__(
        self, name: str, storage: _Storage, offset: int, shape: tuple, stride: tuple
    ) -> None:
        self.name = name
        self._storage, self._offset, self._stride = storage, offset, stride
        self.shape = shape
        self.dtype = ir.DataType.from_numpy(storage.dtype)
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * storage.dtype.itemsize

    def numpy(self) -> np.ndarray:
        flat = self._storage.array()
        itemsize = flat.dtype.itemsize
        view = np.lib.stride_tricks.as_strided(
            flat[self._offset :], self.shape, [s * itemsize for s in self._stride], writeable=False
        )
        return np.ascontiguousarray(view)

    def __repr__(self) -> str:
        return f"PickledTensor({self.name!r}, shape={self.shape}, dtype={self.dtype.name})"


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _rebuild_parameter(data, *_ignored):
    """``torch._utils._rebuild_parameter``: a parameter is its data."""
    return data


# The only names a pickled state dict may use; "rebuild_tensor" is bound per file.
_ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): "rebuild_tensor",
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    **{("torch", name): _StorageType(dtype) for name, dtype in _STORAGES.items()},
}


class _Archive:
    """An open ``torch.save`` zip file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._zip = zipfile.ZipFile(path)
            names = self._zip.namelist()
        except (OSError, zipfile.BadZipFile) as e:
            raise CheckpointError(
                f"{path}: not a PyTorch zip checkpoint ({e}); files from torch before 1.6 "
                "are not read: save them again with torch.save or as safetensors"
            ) from None
        pickles = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            raise CheckpointError(f"{path}: expected one <archive>/data.pkl, found {len(pickles)}")
        self.prefix = pickles[0].removesuffix("data.pkl")
        self.pickle = pickles[0]
        note_read(path)

    def read(self, entry: str) -> bytes:
        try:
            return self._zip.read(entry)
        except (KeyError, OSError, zipfile.BadZipFile, EOFError) as e:
            raise CheckpointError(f"{self.path}: cannot read {entry} ({e})") from None

    def close(self) -> None:
        self._zip.close()


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, archive: _Archive) -> None:
        import io

        super().__init__(io.BytesIO(archive.read(archive.pickle)))
        self.archive = archive

    def find_class(self, module: str, name: str):
        found = _ALLOWED.get((module, name))
        if found is None:
            raise CheckpointError(
                f"{self.archive.path}: refused to unpickle {module}.{name}: only tensors "
                "and plain containers are read from pickled checkpoints"
            )
        return self.rebuild_tensor if found == "rebuild_tensor" else found

    def rebuild_tensor(self, storage, offset, shape, stride, *_ignored) -> tuple:
        """``torch._utils._rebuild_tensor_v2``: checked and kept as a description, not a tensor."""
        if not (
            isinstance(storage, _Storage)
            and _is_count(offset)
            and isinstance(shape, tuple)
            and isinstance(stride, tuple)
            and len(shape) == len(stride)
            and all(_is_count(d) for d in (*shape, *stride))
        ):
            raise CheckpointError(f"{self.archive.path}: malformed tensor record")
        if all(shape):  # the last element a view reads must lie inside its storage
            last = offset + sum((d - 1) * s for d, s in zip(shape, stride, strict=True))
            if last >= storage.numel:
                raise CheckpointError(f"{self.archive.path}: a tensor reads past its storage")
        return ("tensor", storage, offset, shape, stride)

    def persistent_load(self, pid):
        if not (
            isinstance(pid, tuple)
            and len(pid) == 5
            and pid[0] == "storage"
            and isinstance(pid[1], _StorageType)
            and isinstance(pid[2], str)
            and _is_count(pid[4])
        ):
            raise CheckpointError(f"{self.archive.path}: malformed storage record")
        _, kind, key, _location, numel = pid
        entry = f"{self.archive.prefix}data/{key}"
        return _Storage(self.archive, entry, kind.dtype, numel)


def _read_state_dict(archive: _Archive) -> dict[str, PickledTensor]:
    try:
        state = _RestrictedUnpickler(archive).load()
    except CheckpointError:
        raise
    except Exception as e:  # truncated or malformed pickle data
        raise CheckpointError(
            f"{archive.path}: unreadable pickle ({type(e).__name__}: {e})"
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(
            f"{archive.path}: expected a state dict, found {type(state).__name__}"
        )
    tensors = {}
    for name, record in state.items():
        if not (isinstance(name, str) and isinstance(record, tuple) and record[:1] == ("tensor",)):
            raise CheckpointError(f"{archive.path}: entry {name!r} is not a tensor")
        tensors[name] = PickledTensor(name, *record[1:])
    return tensors


class PickleCheckpoint(Closing, Mapping[str, PickledTensor]):
    """The tensors of one or more pickled PyTorch checkpoint files, by name."""

    def __init__(self, archives: list[_Archive], tensors: dict[str, PickledTensor]) -> None:
        self._archives, self._tensors = archives, tensors

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> PickleCheckpoint:
        """Open a pickled checkpoint file or the pickled weights of a model directory.

        A directory is read through its ``pytorch_model.bin.index.json`` when it has
        one, else every file matching :data:`PICKLE_PATTERNS`.

        Raises:
            CheckpointError: No pickled weights, a file that is not a torch zip, a
                name outside the allowed set, or a malformed record.
        """
        path = Path(path)
        if path.is_dir():
            files = _directory_files(path)
        elif path.is_file():
            files = [path]
        else:
            raise CheckpointError(f"no such checkpoint file: {path}")
        archives, tensors = [], {}
        try:
            for file in files:
                archive = _Archive(file)
                archives.append(archive)
                for name, tensor in _read_state_dict(archive).items():
                    if name in tensors:
                        raise CheckpointError(f"{file}: tensor {name!r} is also in another file")
                    tensors[name] = tensor
        except BaseException:
            for archive in archives:
                archive.close()
            raise
        return cls(archives, tensors)

    def close(self) -> None:
        for archive in self._archives:
            archive.close()

    def __getitem__(self, name: str) -> PickledTensor:
        return self._tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)


# Pickles that trainers save beside the weights: never weights themselves.
_NOT_WEIGHTS = ("training_args", "optimizer", "scheduler", "rng_state", "trainer_state")


def pickled_files(directory: Path) -> list[Path]:
    """The files of ``directory`` that hold pickled weights (by name)."""
    found = {p for pattern in PICKLE_PATTERNS for p in directory.glob(pattern) if p.is_file()}
    return sorted(p for p in found if not p.name.startswith(_NOT_WEIGHTS))


def _directory_files(directory: Path) -> list[Path]:
    index = directory / "pytorch_model.bin.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            names = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(f"{index}: unreadable index ({e})") from None
        files = [join_inside(directory, name, source=index) for name in names]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise CheckpointError(f"{directory}: missing checkpoint shards: {', '.join(missing)}")
        return files
    files = pickled_files(directory)
    if not files:
        raise CheckpointError(f"no pickled checkpoint files in {directory}")
    return files
