"""A lazy, memory-mapped reader for safetensors checkpoints.

The format is parsed by hand: an 8-byte little-endian header length, a JSON
header mapping each tensor name to ``{dtype, shape, data_offsets}`` (plus an
optional ``__metadata__`` entry), then the raw little-endian data. Opening a
checkpoint reads only the headers; tensor data is returned as zero-copy, read-only
numpy views of memory-mapped files.

The header is held to the format as strictly as the reference loader holds it: no
name twice, ``__metadata__`` maps names to strings, and the tensors' data cover the
data section exactly (contiguous, no gap, no overlap, nothing after the last).

Each tensor gets a mapping of its own, which is unmapped as soon as the last array
viewing it is freed. A build reads every tensor once: with one mapping per file,
every page it touched would stay resident, and the process's RSS would grow to the
size of the checkpoint. Per-tensor mappings keep it near the largest tensor.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx_ir as ir

from mobius.errors import CheckpointError
from mobius.safe_paths import join_inside
from mobius.weights._closing import Closing
from mobius.weights._tracking import note_read

_DTYPES: dict[str, tuple[np.dtype, ir.DataType]] = {
    "BOOL": (np.dtype(np.bool_), ir.DataType.BOOL),
    "U8": (np.dtype("<u1"), ir.DataType.UINT8),
    "I8": (np.dtype("<i1"), ir.DataType.INT8),
    "U16": (np.dtype("<u2"), ir.DataType.UINT16),
    "I16": (np.dtype("<i2"), ir.DataType.INT16),
    "U32": (np.dtype("<u4"), ir.DataType.UINT32),
    "I32": (np.dtype("<i4"), ir.DataType.INT32),
    "U64": (np.dtype("<u8"), ir.DataType.UINT64),
    "I64": (np.dtype("<i8"), ir.DataType.INT64),
    "F16": (np.dtype("<f2"), ir.DataType.FLOAT16),
    "BF16": (np.dtype(ml_dtypes.bfloat16), ir.DataType.BFLOAT16),
    "F32": (np.dtype("<f4"), ir.DataType.FLOAT),
    "F64": (np.dtype("<f8"), ir.DataType.DOUBLE),
    "C64": (np.dtype("<c8"), ir.DataType.COMPLEX64),  # FNet's TPU DFT matrices
    "F8_E4M3": (np.dtype(ml_dtypes.float8_e4m3fn), ir.DataType.FLOAT8E4M3FN),
    "F8_E5M2": (np.dtype(ml_dtypes.float8_e5m2), ir.DataType.FLOAT8E5M2),
}

_METADATA_KEY = "__metadata__"
# The safetensors format caps its JSON header at 100 MB; a larger length is corrupt.
MAX_HEADER_BYTES = 100_000_000
# CheckpointTensor.slabs reads this much at a time by default.
SLAB_BYTES = 16 << 20


class _File:
    """One safetensors file: its parsed header, and read-only mappings of its tensors."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size, self.data_start, header = _read_header(path)
        self.tensors: dict[str, CheckpointTensor] = {}
        entries = [(name, entry) for name, entry in header.items() if name != _METADATA_KEY]
        for name, entry in sorted(entries, key=_begin_offset):
            self.tensors[name] = _parse_entry(self, name, entry)
        _check_coverage(path, self.tensors.values(), self.data_start, self.size)
        self._closed = False
        note_read(path)

    def map(self, offset: int, nbytes: int) -> tuple[mmap.mmap, int]:
        """Map ``nbytes`` at ``offset`` read-only; return the mapping and where they start in it.

        The mapping belongs to the caller: it is unmapped when the last reference
        to it (or to a numpy view of it) goes.
        """
        if self._closed:
            raise ValueError(f"checkpoint file {self.path} is closed")
        begin = offset - offset % mmap.ALLOCATIONGRANULARITY  # mmap offsets must be aligned
        with open(self.path, "rb") as f:
            if os.fstat(f.fileno()).st_size != self.size:
                raise CheckpointError(f"{self.path}: file changed size since it was opened")
            mapping = mmap.mmap(
                f.fileno(), offset - begin + nbytes, access=mmap.ACCESS_READ, offset=begin
            )
        if hasattr(mapping, "madvise") and hasattr(mmap, "MADV_SEQUENTIAL"):
            # Read once, front to back: ask the kernel for large read-ahead.
            mapping.madvise(mmap.MADV_SEQUENTIAL)
        return mapping, offset - begin

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Refuse further reads; arrays already handed out keep their own mappings."""
        self._closed = True


class CheckpointTensor:
    """One tensor of a safetensors file, read lazily.

    Attributes:
        name: The tensor's name in the checkpoint.
        shape: Its shape.
        dtype: Its element type.
        nbytes: The size of its data in bytes.
        file: The file that holds it.
    """

    __slots__ = ("_file", "_np_dtype", "_offset", "dtype", "name", "nbytes", "shape")

    def __init__(
        self,
        file: _File,
        name: str,
        shape: tuple[int, ...],
        np_dtype: np.dtype,
        dtype: ir.DataType,
        offset: int,
        nbytes: int,
    ) -> None:
        self._file = file
        self._np_dtype = np_dtype
        self._offset = offset
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.nbytes = nbytes

    @property
    def file(self) -> Path:
        """The path of the safetensors file holding this tensor."""
        return self._file.path

    def numpy(self) -> np.ndarray:
        """Return the data as a read-only numpy array viewing a mapping of the file.

        Each call maps the tensor anew; the mapping (and the memory its pages hold)
        is released when the returned array and every view of it are freed.
        """
        if self.nbytes == 0:
            return np.empty(self.shape, dtype=self._np_dtype)
        mapping, start = self._file.map(self._offset, self.nbytes)
        count = self.nbytes // self._np_dtype.itemsize
        flat = np.frombuffer(mapping, dtype=self._np_dtype, count=count, offset=start)
        return flat.reshape(self.shape)

    def slabs(self, max_bytes: int | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(first row, rows)``: the data in runs of whole rows along axis 0.

        Each run is read into one buffer of at most ``max_bytes`` (default
        ``SLAB_BYTES``, but at least one row), which the next run overwrites: copy
        out what you keep. This lets a caller cast or transpose a tensor into its
        own output while holding only that output and one buffer, not the tensor's
        mapped pages as well.

        Raises:
            CheckpointError: The file changed size since it was opened, or ends early.
        """
        path = self._file.path
        if self._file.closed:
            raise ValueError(f"checkpoint file {path} is closed")
        if self.nbytes == 0:
            return
        rows = self.shape[0] if self.shape else 1
        row_shape = self.shape[1:]
        row_bytes = self.nbytes // rows
        step = max(1, int(SLAB_BYTES if max_bytes is None else max_bytes) // row_bytes)
        buffer = np.empty(min(step, rows) * row_bytes, np.uint8)
        with open(path, "rb", buffering=0) as f:
            if os.fstat(f.fileno()).st_size != self._file.size:
                raise CheckpointError(f"{path}: file changed size since it was opened")
            f.seek(self._offset)
            for start in range(0, rows, step):
                count = min(step, rows - start)
                view = memoryview(buffer)[: count * row_bytes]
                read = 0
                while read < len(view):
                    n = f.readinto(view[read:])
                    if not n:
                        raise CheckpointError(
                            f"{path}: file is truncated: tensor {self.name!r} "
                            "ends past the end of the file"
                        )
                    read += n
                slab = buffer[: count * row_bytes].view(self._np_dtype)
                yield start, slab.reshape((count, *row_shape)) if self.shape else slab.reshape(())

    def __repr__(self) -> str:
        return f"CheckpointTensor({self.name!r}, shape={self.shape}, dtype={self.dtype.name})"


class SafetensorsCheckpoint(Closing, Mapping[str, CheckpointTensor]):
    """The tensors of one safetensors file or a sharded set, by name.

    Create it with :meth:`open`. Only headers are read up front; each tensor's
    data is mapped from disk when :meth:`CheckpointTensor.numpy` is called, and
    unmapped when that array is freed.
    """

    def __init__(self, files: list[_File], tensors: dict[str, CheckpointTensor]) -> None:
        self._files = files
        self._tensors = tensors

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> SafetensorsCheckpoint:
        """Open a ``.safetensors`` file, a ``*safetensors.index.json`` or a model directory.

        A directory is read through its ``model.safetensors.index.json`` (or the
        single other ``*safetensors.index.json``), else its ``model.safetensors`` (or
        diffusers' ``diffusion_pytorch_model.safetensors``), else every
        ``*.safetensors`` file in it.

        Raises:
            CheckpointError: The checkpoint is missing, truncated or corrupt.
        """
        path = Path(path)
        if path.is_dir():
            return _open_directory(path)
        if not path.is_file():
            raise CheckpointError(f"no such checkpoint file: {path}")
        if path.name.endswith("safetensors.index.json"):
            return _open_index(path)
        file = _File(path)
        return cls([file], dict(file.tensors))

    @property
    def files(self) -> list[Path]:
        """The safetensors files this checkpoint reads from."""
        return [f.path for f in self._files]

    def close(self) -> None:
        """Refuse further reads; arrays already returned stay valid."""
        for f in self._files:
            f.close()

    def __getitem__(self, name: str) -> CheckpointTensor:
        return self._tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def __repr__(self) -> str:
        names = ", ".join(str(p) for p in self.files)
        return f"SafetensorsCheckpoint([{names}], {len(self)} tensors)"


def checkpoint_dtype(checkpoint: Mapping[str, CheckpointTensor]) -> ir.DataType | None:
    """Return the floating-point dtype holding the most bytes, or None if there is none.

    A tensor's bytes are its stored ``nbytes``, or for a source that has none
    (a :class:`~mobius.weights.DerivedTensor`) its element count times the itemsize.
    """
    totals: dict[ir.DataType, int] = {}
    for tensor in checkpoint.values():
        if tensor.dtype.is_floating_point():
            size = getattr(tensor, "nbytes", None)
            if size is None:
                size = math.prod(tensor.shape) * tensor.dtype.itemsize
            totals[tensor.dtype] = totals.get(tensor.dtype, 0) + size
    if not totals:
        return None
    return max(totals, key=lambda dtype: totals[dtype])


def _open_directory(directory: Path) -> SafetensorsCheckpoint:
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        return _open_index(index)
    indexes = sorted(directory.glob("*safetensors.index.json"))
    if len(indexes) == 1:
        return _open_index(indexes[0])
    if len(indexes) > 1:
        names = ", ".join(p.name for p in indexes)
        raise CheckpointError(f"{directory}: several safetensors index files ({names})")
    # transformers' and diffusers' default names win over variants beside them (``*.fp16.safetensors``).
    for name in ("model.safetensors", "diffusion_pytorch_model.safetensors"):
        if (directory / name).is_file():
            return SafetensorsCheckpoint.open(directory / name)
    paths = sorted(p for p in directory.glob("*.safetensors") if p.is_file())
    if not paths:
        raise CheckpointError(f"no safetensors files in {directory}")
    files = [_File(p) for p in paths]
    tensors: dict[str, CheckpointTensor] = {}
    for f in files:
        for name, tensor in f.tensors.items():
            if name in tensors:
                raise CheckpointError(
                    f"{f.path}: tensor {name!r} is also in {tensors[name].file.name}"
                )
            tensors[name] = tensor
    return SafetensorsCheckpoint(files, tensors)


def _open_index(index: Path) -> SafetensorsCheckpoint:
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{index}: unreadable safetensors index ({e})") from e
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index}: 'weight_map' must map tensor names to file names")

    files: dict[str, _File] = {}
    for shard in dict.fromkeys(weight_map.values()):
        shard_path = join_inside(index.parent, shard, source=index)  # no /abs or ../ shards
        if not shard_path.is_file():
            raise CheckpointError(f"missing shard {shard_path} (listed in {index.name})")
        files[shard] = _File(shard_path)

    tensors: dict[str, CheckpointTensor] = {}
    for name, shard in weight_map.items():
        tensor = files[shard].tensors.get(name)
        if tensor is None:
            raise CheckpointError(
                f"{files[shard].path}: tensor {name!r} listed in {index.name} is not in this shard"
            )
        tensors[name] = tensor
    for f in files.values():  # tensors a shard holds beyond what the index lists
        for name, tensor in f.tensors.items():
            tensors.setdefault(name, tensor)
    return SafetensorsCheckpoint(list(files.values()), tensors)


class _DuplicateName(ValueError):
    """A JSON object of the header names one key twice (``json`` would keep the last)."""


def _unique_names(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """``object_pairs_hook`` for the header: a dict, refusing any key given twice."""
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateName(key)
        result[key] = value
    return result


def _check_coverage(path: Path, tensors, data_start: int, size: int) -> None:
    """The tensors' data must tile the data section: each starts where the one before
    it ends, the first at its start and the last at the end of the file (the format's
    rule, which the reference loader enforces; a gap could hide anything)."""
    position = 0
    for tensor in sorted(tensors, key=lambda t: (t._offset, t.nbytes)):
        begin = tensor._offset - data_start
        if begin > position:
            raise CheckpointError(
                f"{path}: bytes {position} to {begin} of the data section belong to no tensor "
                f"(a hole before tensor {tensor.name!r})"
            )
        if begin < position:
            raise CheckpointError(f"{path}: tensor {tensor.name!r} overlaps the tensor before it")
        position = begin + tensor.nbytes
    if data_start + position != size:
        raise CheckpointError(
            f"{path}: the data section has {size - data_start} bytes but its tensors "
            f"cover {position}"
        )


def _read_header(path: Path) -> tuple[int, int, dict[str, object]]:
    """Return (file size, offset of the data section, parsed header) of ``path``."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise CheckpointError(f"{path}: too small to be a safetensors file ({size} bytes)")
            (header_len,) = struct.unpack("<Q", f.read(8))
            if header_len > MAX_HEADER_BYTES:
                raise CheckpointError(
                    f"{path}: header length {header_len} is over the format's limit "
                    f"of {MAX_HEADER_BYTES} bytes"
                )
            if 8 + header_len > size:
                raise CheckpointError(
                    f"{path}: header length {header_len} is larger than the file ({size} bytes)"
                )
            raw = f.read(header_len)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror or e})") from e
    try:
        header = json.loads(raw, object_pairs_hook=_unique_names)
    except _DuplicateName as e:
        raise CheckpointError(f"{path}: the header names {e.args[0]!r} twice") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{path}: invalid JSON header ({e})") from e
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: invalid JSON header (not an object)")
    metadata = header.get(_METADATA_KEY)
    if metadata is not None:  # the reference reads it as a map of strings, or null
        if not isinstance(metadata, dict):
            raise CheckpointError(f"{path}: {_METADATA_KEY} is not an object")
        for key, value in metadata.items():
            if not isinstance(value, str):
                raise CheckpointError(
                    f"{path}: {_METADATA_KEY} entry {key!r} is {type(value).__name__}, not a string"
                )
    return size, 8 + header_len, header


def _begin_offset(item: tuple[str, object]) -> int:
    entry = item[1]
    if isinstance(entry, dict):
        offsets = entry.get("data_offsets")
        if isinstance(offsets, list) and offsets and isinstance(offsets[0], int):
            return offsets[0]
    return 0


def _parse_entry(file: _File, name: str, entry: object) -> CheckpointTensor:
    path = file.path
    if not isinstance(entry, dict):
        raise CheckpointError(f"{path}: header entry for tensor {name!r} is not an object")
    dtype_name, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype_name, str) or dtype_name not in _DTYPES:
        raise CheckpointError(f"{path}: tensor {name!r} has unknown dtype {dtype_name!r}")
    if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
        raise CheckpointError(f"{path}: tensor {name!r} has invalid shape {shape!r}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_is_count(o) for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise CheckpointError(f"{path}: tensor {name!r} has invalid data_offsets {offsets!r}")
    np_dtype, dtype = _DTYPES[dtype_name]
    begin, end = offsets
    expected = math.prod(shape) * np_dtype.itemsize
    if end - begin != expected:
        raise CheckpointError(
            f"{path}: tensor {name!r} has {end - begin} bytes of data but shape {shape} "
            f"of {dtype_name} needs {expected}"
        )
    if file.data_start + end > file.size:
        raise CheckpointError(
            f"{path}: file is truncated: tensor {name!r} ends at byte {file.data_start + end} "
            f"but the file has {file.size} bytes"
        )
    return CheckpointTensor(
        file, name, tuple(shape), np_dtype, dtype, file.data_start + begin, end - begin
    )


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
