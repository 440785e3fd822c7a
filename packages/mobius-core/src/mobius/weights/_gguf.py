"""A safe, lazy reader of GGUF files (versions 2 and 3), with no dependency on ``gguf`` or torch.

Layout (little-endian): ``b"GGUF"``, u32 version, u64 tensor count, u64 metadata
count; metadata entries (string key, u32 value type, value); tensor infos (string
name, u32 n_dims, u64 dims innermost first, u32 GGML type, u64 offset); then the
data section, aligned to ``general.alignment`` (32 by default). Strings are a u64
length and UTF-8 bytes.

Every count, length, offset and type is checked against the file before it is
used, so a truncated or corrupt file raises :class:`~mobius.errors.CheckpointError`
with one line naming the file and the fault. Tensor data is memory-mapped and
decoded one tensor at a time, on demand.
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from mobius.errors import CheckpointError
from mobius.weights._closing import Closing
from mobius.weights._gguf_quant import GGML_TYPES, RepackedWeight, can_dequantize, dequantize
from mobius.weights._tracking import note_read

_MAGIC = b"GGUF"
_MAX_KEY = 1 << 16  # bytes of a metadata key
_MAX_STRING = 1 << 26  # bytes of one string value (chat templates are a few KB)
_MAX_NAME = 1 << 10  # bytes of a tensor name (llama.cpp allows 63)
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_ALIGNMENT = 1 << 16
_MAX_NESTING = 2  # arrays of arrays
_MAX_ITEMS = 1 << 24  # elements of one array (vocabularies are under a million)
_MAX_ENTRIES = 1 << 20  # metadata entries, and tensors

# GGUF value type -> (struct format, size); 8 = string and 9 = array are handled apart.
_SCALARS = {
    0: ("<B", 1),
    1: ("<b", 1),
    2: ("<H", 2),
    3: ("<h", 2),
    4: ("<I", 4),
    5: ("<i", 4),
    6: ("<f", 4),
    7: ("<?", 1),
    10: ("<Q", 8),
    11: ("<q", 8),
    12: ("<d", 8),
}
_NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1"}
_NUMPY.update({10: "<u8", 11: "<i8", 12: "<f8"})


class _Cursor:
    """Bounds-checked little-endian reads from a buffer; every failure names the file."""

    def __init__(self, buf, path: Path) -> None:
        self.buf, self.path, self.pos, self.size = buf, path, 0, len(buf)

    def fail(self, message: str) -> CheckpointError:
        return CheckpointError(f"{self.path}: {message}")

    def take(self, n: int, what: str) -> int:
        """Reserve ``n`` bytes for ``what`` and return where they start."""
        if n > self.size - self.pos:
            raise self.fail(
                f"file is truncated: {what} needs {n} bytes at byte {self.pos} "
                f"but the file has {self.size}"
            )
        start, self.pos = self.pos, self.pos + n
        return start

    def scalar(self, vtype: int, what: str):
        fmt, size = _SCALARS[vtype]
        return struct.unpack_from(fmt, self.buf, self.take(size, what))[0]

    def count(self, what: str, min_item_bytes: int, limit: int = _MAX_ITEMS) -> int:
        """A u64 element count, refused above ``limit`` or when its items cannot fit the file."""
        n = self.scalar(10, what)
        if n > limit:
            raise self.fail(f"{what} is {n}, more than mobius reads (at most {limit})")
        if n * min_item_bytes > self.size - self.pos:
            raise self.fail(f"{what} is {n}, more than the file can hold")
        return n

    def string(self, what: str, limit: int = _MAX_STRING) -> str:
        n = self.scalar(10, f"length of {what}")
        if n > limit:
            raise self.fail(f"{what} is {n} bytes long (at most {limit})")
        start = self.take(n, what)
        try:
            return bytes(self.buf[start : start + n]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"{what} is not valid UTF-8 ({e.reason})") from e

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype in _SCALARS:
            return self.scalar(vtype, what)
        if vtype == 8:
            return self.string(what)
        if vtype != 9:
            raise self.fail(f"{what} has unknown value type {vtype}")
        if depth >= _MAX_NESTING:
            raise self.fail(f"{what} nests arrays more than {_MAX_NESTING} deep")
        etype = self.scalar(4, f"element type of {what}")
        if etype in _SCALARS:
            n = self.count(f"element count of {what}", _SCALARS[etype][1])
            start = self.take(n * _SCALARS[etype][1], what)
            items = np.frombuffer(self.buf, _NUMPY[etype], n, start).tolist()
            return [bool(v) for v in items] if etype == 7 else items
        if etype not in (8, 9):
            raise self.fail(f"{what} has unknown element type {etype}")
        n = self.count(f"element count of {what}", 8 if etype == 8 else 12)
        return [self.value(etype, f"{what}[{i}]", depth + 1) for i in range(n)]


# The largest integer a typed read accepts unless told otherwise: every count and size a
# model has fits, and the graph builders' int32 arithmetic cannot overflow on it.
_MAX_INT = (1 << 31) - 1


def _shown(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut short: a metadata value may be a long array."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class GGUFMetadata(Mapping[str, Any]):
    """A GGUF file's metadata by key, with reads that check each value's type and range.

    The header is a stranger's input: a key mobius uses is read through ``get_int``,
    ``get_str_list``... which return the value (or ``default`` when the key is absent)
    and raise a one-line :class:`~mobius.errors.CheckpointError` naming the file, the
    key, the value and what was expected when it is of the wrong type or out of range.
    Plain mapping reads (``metadata[key]``) give the raw values.
    """

    def __init__(self, values: Mapping[str, Any], source: str | os.PathLike[str]) -> None:
        self._values = dict(values)
        self.source = str(source)

    @classmethod
    def of(cls, metadata: Mapping[str, Any]) -> GGUFMetadata:
        """``metadata`` itself when it is a :class:`GGUFMetadata`, else wrapped as one."""
        return metadata if isinstance(metadata, GGUFMetadata) else cls(metadata, "GGUF metadata")

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def error(self, key: str, value: Any, expected: str) -> CheckpointError:
        """The error for ``key`` holding ``value`` where ``expected`` belongs."""
        return CheckpointError(f"{self.source}: metadata {key} = {_shown(value)} is not {expected}")

    def get_int(
        self, key: str, default: Any = None, *, min: int = 0, max: int = _MAX_INT
    ) -> int | Any:
        """An integer in ``[min, max]`` (a bool is not one)."""
        if key not in self._values:
            return default
        value = self._values[key]
        if not _is_int(value) or not min <= value <= max:
            raise self.error(key, value, f"an integer from {min} to {max}")
        return value

    def get_float(self, key: str, default: Any = None, *, positive: bool = False) -> float | Any:
        """A finite number (above 0 when ``positive``), as a float; an integer is one."""
        if key not in self._values:
            return default
        value = self._values[key]
        if not _is_finite(value) or (positive and value <= 0):
            raise self.error(key, value, "a positive number" if positive else "a finite number")
        return float(value)

    def get_bool(self, key: str, default: Any = None) -> bool | Any:
        """A GGUF bool (an integer is not one: llama.cpp reads bool keys by their type)."""
        if key not in self._values:
            return default
        value = self._values[key]
        if not isinstance(value, bool):
            raise self.error(key, value, "a bool")
        return value

    def get_str(self, key: str, default: Any = None) -> str | Any:
        """A string."""
        if key not in self._values:
            return default
        value = self._values[key]
        if not isinstance(value, str):
            raise self.error(key, value, "a string")
        return value

    def _list(self, key: str, valid, item: str, length: int | None) -> list | None:
        """The list at ``key`` whose every element passes ``valid`` (``item`` says what it is)."""
        if key not in self._values:
            return None
        value = self._values[key]
        if not isinstance(value, list):
            raise self.error(key, value, f"a list (each item {item})")
        bad = next((i for i, element in enumerate(value) if not valid(element)), None)
        if bad is not None:
            raise self.error(f"{key}[{bad}]", value[bad], item)
        if length is not None and len(value) != length:
            raise CheckpointError(
                f"{self.source}: metadata {key} has {len(value)} entries, expected {length}"
            )
        return value

    def get_str_list(self, key: str, *, length: int | None = None) -> list[str] | None:
        """A list of strings (of ``length`` entries, when given), or None when absent."""
        return self._list(key, lambda v: isinstance(v, str), "a string", length)

    def get_int_list(
        self, key: str, *, min: int = 0, max: int = _MAX_INT, length: int | None = None
    ) -> list[int] | None:
        """A list of integers in ``[min, max]``, or None when absent."""

        def valid(item: Any) -> bool:
            return _is_int(item) and min <= item <= max

        return self._list(key, valid, f"an integer from {min} to {max}", length)

    def get_float_list(self, key: str, *, length: int | None = None) -> list[float] | None:
        """A list of finite numbers, or None when absent."""
        return self._list(key, _is_finite, "a finite number", length)


class GGUFTensor:
    """One tensor of a GGUF file, read lazily.

    Attributes:
        name: Its GGUF name (``blk.0.attn_q.weight``).
        type_name: Its GGML type (``F32``, ``Q4_1``...).
        shape: Its shape in numpy order (GGUF lists dimensions innermost first).
        nbytes: The size of its data in the file.
    """

    __slots__ = ("_file", "_offset", "name", "nbytes", "shape", "type_name")

    def __init__(self, file: GGUFFile, name, type_name, shape, offset, nbytes) -> None:
        self._file, self._offset = file, offset
        self.name, self.type_name, self.shape, self.nbytes = name, type_name, shape, nbytes

    def rows(self, start: int, stop: int) -> GGUFTensor:
        """Rows ``start:stop`` along the first axis, as a tensor of its own (read lazily).

        Rows hold whole blocks, so the slice keeps the stored type: a fused projection's
        parts (``attn_qkv``) or one expert of a stacked ``[experts, rows, cols]`` tensor.
        A 1-D tensor slices only when its type has no blocks (a bias).
        """
        blocked = next(t[1] for t in GGML_TYPES.values() if t[0] == self.type_name) > 1
        if (blocked and len(self.shape) < 2) or not 0 <= start < stop <= self.shape[0]:
            raise IndexError(f"{self.name}: no rows {start}:{stop} of shape {self.shape}")
        size = self.nbytes // self.shape[0]
        return GGUFTensor(
            self._file,
            f"{self.name}[{start}:{stop}]",
            self.type_name,
            (stop - start, *self.shape[1:]),
            self._offset + start * size,
            (stop - start) * size,
        )

    def item(self, index: int) -> GGUFTensor:
        """The ``index``-th slice along the first axis (one expert of a stacked tensor)."""
        if len(self.shape) < 3 or not 0 <= index < self.shape[0]:
            raise IndexError(f"{self.name}: no item {index} of shape {self.shape}")
        part = self.rows(index, index + 1)
        part.name, part.shape = f"{self.name}[{index}]", self.shape[1:]
        return part

    def raw(self) -> np.ndarray:
        """The tensor's bytes as a flat read-only uint8 view of the mapped file."""
        return np.frombuffer(self._file.buffer(), np.uint8, self.nbytes, self._offset)

    def numpy(self) -> np.ndarray:
        """The tensor decoded to float32 (integer types as they are)."""
        if not can_dequantize(self.type_name):
            raise CheckpointError(
                f"{self._file.path}: tensor {self.name!r} has type {self.type_name}, "
                "which mobius cannot decode yet"
            )
        return dequantize(self.raw(), self.type_name, self.shape)

    @property
    def repackable(self) -> bool:
        """Whether :meth:`repack` gives ``MatMulNBits`` parts (from the header alone)."""
        from mobius.weights._gguf_quant import REPACKABLE

        return self.type_name in REPACKABLE and len(self.shape) == 2

    def repack(self) -> RepackedWeight | None:
        """``MatMulNBits`` parts of a 2-D weight in GGML blocks; None for any other tensor."""
        from mobius.weights._gguf_quant import repack

        if not self.repackable:
            return None
        n, k = self.shape
        return repack(self.raw(), self.type_name, n, k)

    def __repr__(self) -> str:
        return f"GGUFTensor({self.name!r}, {self.type_name}, shape={self.shape})"


class GGUFFile(Closing):
    """The parsed header of a GGUF file: its metadata and tensor infos.

    Create it with :meth:`open`; tensor data is mapped on first use.

    Attributes:
        path: The file.
        version: 2 or 3.
        metadata: Every metadata entry, by key (arrays as lists), with typed reads
            (:class:`GGUFMetadata`).
        tensors: Every tensor, by GGUF name, in file order.
        alignment: The data alignment in bytes.
    """

    def __init__(self, path: Path, buf: mmap.mmap | bytes) -> None:
        self.path, self._mmap = path, buf if isinstance(buf, mmap.mmap) else None
        self._buf = buf
        cur = _Cursor(buf, path)
        if len(buf) < 4 or bytes(buf[:4]) != _MAGIC:
            raise cur.fail(f"not a GGUF file (magic {bytes(buf[:4])!r}, expected {_MAGIC!r})")
        cur.pos = 4
        self.version = cur.scalar(4, "version")
        if self.version in (2 << 24, 3 << 24):
            raise cur.fail("big-endian GGUF files are not supported")
        if self.version not in (2, 3):
            raise cur.fail(f"GGUF version {self.version} is not supported (2 or 3)")
        # Smallest entries: name length, n_dims, type, offset; key length, type, a byte.
        n_tensors = cur.count("tensor count", 24, _MAX_ENTRIES)
        n_kv = cur.count("metadata count", 13, _MAX_ENTRIES)
        values: dict[str, Any] = {}
        for i in range(n_kv):
            key = cur.string(f"metadata key #{i}", _MAX_KEY)
            if key in values:
                raise cur.fail(f"metadata key {key!r} appears twice")
            values[key] = cur.value(cur.scalar(4, f"type of {key!r}"), f"metadata {key!r}")
        self.metadata = GGUFMetadata(values, path)
        self.alignment = values.get("general.alignment", 32)
        if (
            not isinstance(self.alignment, int)
            or not 0 < self.alignment <= _MAX_ALIGNMENT
            or self.alignment & (self.alignment - 1)
        ):
            raise cur.fail(f"general.alignment {self.alignment!r} is not a power of two")
        infos = [self._tensor_info(cur, i) for i in range(n_tensors)]
        data_start = -(-cur.pos // self.alignment) * self.alignment
        self.tensors: dict[str, GGUFTensor] = {}
        for name, type_name, shape, offset, nbytes in infos:
            if name in self.tensors:
                raise cur.fail(f"tensor {name!r} appears twice")
            if offset % self.alignment:
                raise cur.fail(f"tensor {name!r} offset {offset} is not {self.alignment}-aligned")
            end = data_start + offset + nbytes
            if end > cur.size:
                raise cur.fail(
                    f"file is truncated: tensor {name!r} ends at byte {end} "
                    f"but the file has {cur.size}"
                )
            self.tensors[name] = GGUFTensor(
                self, name, type_name, shape, data_start + offset, nbytes
            )

    @staticmethod
    def _tensor_info(cur: _Cursor, i: int):
        name = cur.string(f"name of tensor #{i}", _MAX_NAME)
        n_dims = cur.scalar(4, f"rank of {name!r}")
        if not 1 <= n_dims <= _MAX_DIMS:
            raise cur.fail(f"tensor {name!r} has rank {n_dims} (1 to {_MAX_DIMS})")
        dims = [cur.scalar(10, f"shape of {name!r}") for _ in range(n_dims)]
        type_id = cur.scalar(4, f"type of {name!r}")
        if type_id not in GGML_TYPES:
            raise cur.fail(f"tensor {name!r} has unknown GGML type {type_id}")
        type_name, block, size = GGML_TYPES[type_id]
        offset = cur.scalar(10, f"offset of {name!r}")
        if dims[0] % block:
            raise cur.fail(f"tensor {name!r} row of {dims[0]} is not whole {type_name} blocks")
        nbytes = math.prod(dims) // block * size
        if nbytes > cur.size:
            raise cur.fail(f"tensor {name!r} of shape {dims} is larger than the file")
        return name, type_name, tuple(reversed(dims)), offset, nbytes

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> GGUFFile:
        """Parse the header of ``path``; the data stays on disk until a tensor is read.

        Raises:
            CheckpointError: The file is missing, truncated or corrupt.
        """
        path = Path(path)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        except OSError as e:
            raise CheckpointError(f"{path}: cannot read ({e.strerror or e})") from e
        try:
            file = cls(path, buf)
        except BaseException:
            if isinstance(buf, mmap.mmap):
                buf.close()
            raise
        note_read(path)
        return file

    def buffer(self):
        """The mapped file (raises once closed)."""
        if self._buf is None:
            raise ValueError(f"GGUF file {self.path} is closed")
        return self._buf

    @property
    def architecture(self) -> str:
        """``general.architecture`` (``llama``, ``qwen2``...)."""
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise CheckpointError(f"{self.path}: no general.architecture in the metadata")
        return arch

    def close(self) -> None:
        """Drop the mapping; arrays already handed out keep it alive until freed."""
        mapping, self._buf, self._mmap = self._mmap, None, None
        if mapping is not None:
            with contextlib.suppress(BufferError):
                mapping.close()

    def __repr__(self) -> str:
        return f"GGUFFile({str(self.path)!r}, v{self.version}, {len(self.tensors)} tensors)"
