"""Tests for the hand-written lazy safetensors reader."""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx_ir as ir
import pytest
from safetensors.numpy import save_file

from mobius.errors import CheckpointError
from mobius.weights._safetensors import (
    CheckpointTensor,
    SafetensorsCheckpoint,
    checkpoint_dtype,
)


def write_raw(path: Path, tensors: dict[str, tuple[str, list[int], bytes]], **extra) -> Path:
    """Write a safetensors file by hand: ``{name: (dtype string, shape, raw bytes)}``."""
    header: dict[str, object] = dict(extra)
    data = b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    return path


def write_header(path: Path, header: object, data: bytes = b"") -> Path:
    """Write a file with an arbitrary JSON header followed by ``data``."""
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    return path


def is_mapped(array: np.ndarray) -> bool:
    """Whether ``array`` is a view whose memory ultimately belongs to an mmap."""
    base: object = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return isinstance(base, mmap.mmap)


@pytest.fixture
def sharded_dir(tmp_path: Path) -> Path:
    save_file({"a": np.arange(6, dtype=np.float32).reshape(2, 3)}, tmp_path / "m-00001.safetensors")
    save_file(
        {"b": np.ones(4, dtype=np.float16), "c": np.array([1, 2], dtype=np.int64)},
        tmp_path / "m-00002.safetensors",
    )
    index = {
        "metadata": {"total_size": 24 + 8 + 16},
        "weight_map": {
            "a": "m-00001.safetensors",
            "b": "m-00002.safetensors",
            "c": "m-00002.safetensors",
        },
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    return tmp_path


# -- reading ------------------------------------------------------------------


def test_single_file(tmp_path: Path) -> None:
    arrays = {
        "w": np.arange(12, dtype=np.float32).reshape(3, 4),
        "i": np.array([-1, 5], dtype=np.int32),
        "flag": np.array([True, False, True]),
        "scalar": np.array(2.5, dtype=np.float64),
    }
    path = tmp_path / "x.safetensors"
    save_file(arrays, path, metadata={"format": "pt"})
    with SafetensorsCheckpoint.open(path) as ckpt:
        assert set(ckpt) == set(arrays)
        assert len(ckpt) == 4
        assert ckpt.files == [path]
        w = ckpt["w"]
        assert isinstance(w, CheckpointTensor)
        assert (w.name, w.shape, w.dtype, w.nbytes) == ("w", (3, 4), ir.DataType.FLOAT, 48)
        assert ckpt["flag"].dtype == ir.DataType.BOOL
        assert ckpt["scalar"].shape == ()
        for name, expected in arrays.items():
            got = ckpt[name].numpy()
            assert got.dtype == expected.dtype
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    ("dtype", "ir_dtype"),
    [
        (np.uint8, ir.DataType.UINT8),
        (np.int8, ir.DataType.INT8),
        (np.int16, ir.DataType.INT16),
        (np.uint16, ir.DataType.UINT16),
        (np.uint32, ir.DataType.UINT32),
        (np.int64, ir.DataType.INT64),
        (np.uint64, ir.DataType.UINT64),
        (np.float16, ir.DataType.FLOAT16),
        (np.float64, ir.DataType.DOUBLE),
    ],
)
def test_numpy_dtypes(tmp_path: Path, dtype: type, ir_dtype: ir.DataType) -> None:
    array = np.arange(5).astype(dtype)
    save_file({"t": array}, tmp_path / "x.safetensors")
    with SafetensorsCheckpoint.open(tmp_path / "x.safetensors") as ckpt:
        assert ckpt["t"].dtype == ir_dtype
        got = ckpt["t"].numpy()
        assert got.dtype == array.dtype
        np.testing.assert_array_equal(got, array)


@pytest.mark.parametrize(
    ("code", "ml_dtype", "ir_dtype"),
    [
        ("BF16", ml_dtypes.bfloat16, ir.DataType.BFLOAT16),
        ("F8_E4M3", ml_dtypes.float8_e4m3fn, ir.DataType.FLOAT8E4M3FN),
        ("F8_E5M2", ml_dtypes.float8_e5m2, ir.DataType.FLOAT8E5M2),
    ],
)
def test_ml_dtypes_round_trip_bit_exact(
    tmp_path: Path, code: str, ml_dtype: type, ir_dtype: ir.DataType
) -> None:
    values = np.array([[0.0, -1.5, 3.140625], [1e-3, -448.0, np.nan]], dtype=np.float32)
    array = values.astype(ml_dtype)
    path = write_raw(tmp_path / "x.safetensors", {"t": (code, [2, 3], array.tobytes())})
    with SafetensorsCheckpoint.open(path) as ckpt:
        tensor = ckpt["t"]
        assert tensor.dtype == ir_dtype
        assert tensor.nbytes == array.nbytes
        got = tensor.numpy()
        assert got.dtype == np.dtype(ml_dtype)
        assert got.shape == (2, 3)
        assert got.tobytes() == array.tobytes()


def test_sharded_directory(sharded_dir: Path) -> None:
    with SafetensorsCheckpoint.open(sharded_dir) as ckpt:
        assert list(ckpt) == ["a", "b", "c"]
        assert ckpt.files == [
            sharded_dir / "m-00001.safetensors",
            sharded_dir / "m-00002.safetensors",
        ]
        np.testing.assert_array_equal(
            ckpt["a"].numpy(), np.arange(6, dtype=np.float32).reshape(2, 3)
        )
        np.testing.assert_array_equal(ckpt["b"].numpy(), np.ones(4, dtype=np.float16))
        np.testing.assert_array_equal(ckpt["c"].numpy(), [1, 2])


def test_index_file_path_and_other_index_name(sharded_dir: Path) -> None:
    index = sharded_dir / "model.safetensors.index.json"
    assert set(SafetensorsCheckpoint.open(index)) == {"a", "b", "c"}
    renamed = index.rename(sharded_dir / "diffusion_pytorch_model.safetensors.index.json")
    assert set(SafetensorsCheckpoint.open(sharded_dir)) == {"a", "b", "c"}
    assert set(SafetensorsCheckpoint.open(renamed)) == {"a", "b", "c"}


def test_directory_with_model_safetensors(tmp_path: Path) -> None:
    save_file({"x": np.zeros(2, dtype=np.float32)}, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text("{}")
    ckpt = SafetensorsCheckpoint.open(tmp_path)
    assert ckpt.files == [tmp_path / "model.safetensors"]
    assert list(ckpt) == ["x"]


def test_directory_with_other_safetensors_names(tmp_path: Path) -> None:
    save_file({"x": np.zeros(2, dtype=np.float32)}, tmp_path / "a.safetensors")
    save_file({"y": np.zeros(2, dtype=np.float32)}, tmp_path / "b.safetensors")
    assert set(SafetensorsCheckpoint.open(tmp_path)) == {"x", "y"}


def test_empty_tensor(tmp_path: Path) -> None:
    save_file({"e": np.zeros((0, 3), dtype=np.float32)}, tmp_path / "x.safetensors")
    got = SafetensorsCheckpoint.open(tmp_path / "x.safetensors")["e"].numpy()
    assert got.shape == (0, 3)
    assert got.dtype == np.float32


# -- laziness -----------------------------------------------------------------


def test_open_reads_only_the_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = np.zeros(1 << 16, dtype=np.float32)
    path = tmp_path / "x.safetensors"
    save_file({"big": big}, path)
    header_len = struct.unpack("<Q", path.read_bytes()[:8])[0]

    requested: list[int] = []
    real_open = open

    class Spy:
        def __init__(self, f) -> None:
            self._f = f

        def read(self, n: int = -1) -> bytes:
            requested.append(n)
            return self._f.read(n)

        def __getattr__(self, attr: str):
            return getattr(self._f, attr)

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self._f.close()

    def spy_open(file, mode="r", *args, **kwargs):
        return Spy(real_open(file, mode, *args, **kwargs))

    monkeypatch.setattr("builtins.open", spy_open)
    ckpt = SafetensorsCheckpoint.open(path)
    assert sum(requested) <= 8 + header_len < big.nbytes
    assert all(n >= 0 for n in requested)  # never read() to the end

    requested.clear()
    array = ckpt["big"].numpy()
    assert requested == []  # data comes from the memory map, not read()
    assert is_mapped(array)
    assert not array.flags.writeable
    assert array.nbytes == big.nbytes


def test_arrays_survive_close(tmp_path: Path) -> None:
    save_file({"x": np.arange(4, dtype=np.float32)}, tmp_path / "x.safetensors")
    ckpt = SafetensorsCheckpoint.open(tmp_path / "x.safetensors")
    array = ckpt["x"].numpy()
    ckpt.close()
    np.testing.assert_array_equal(array, np.arange(4, dtype=np.float32))
    with pytest.raises(ValueError, match="closed"):
        ckpt["x"].numpy()


# -- errors -------------------------------------------------------------------


def test_header_length_larger_than_file(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", 10_000) + b"{}")
    with pytest.raises(CheckpointError, match=r"header length 10000 is larger than the file") as e:
        SafetensorsCheckpoint.open(path)
    assert str(path) in str(e.value)


def test_file_too_small(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    path.write_bytes(b"\x01\x02")
    with pytest.raises(CheckpointError, match="too small"):
        SafetensorsCheckpoint.open(path)


@pytest.mark.parametrize("blob", [b"{not json", b"\xff\xfe", b"[1, 2]"])
def test_invalid_json_header(tmp_path: Path, blob: bytes) -> None:
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", len(blob)) + blob)
    with pytest.raises(CheckpointError, match="invalid JSON header") as e:
        SafetensorsCheckpoint.open(path)
    assert str(path) in str(e.value)
    assert "\n" not in str(e.value)


def test_truncated_file(tmp_path: Path) -> None:
    path = tmp_path / "x.safetensors"
    save_file({"w": np.ones((64, 64), dtype=np.float32)}, path)
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="truncated") as e:
        SafetensorsCheckpoint.open(path)
    assert str(path) in str(e.value)
    assert "'w'" in str(e.value)


def test_offsets_disagree_with_shape(tmp_path: Path) -> None:
    header = {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}}
    path = write_header(tmp_path / "x.safetensors", header, b"\0" * 24)
    with pytest.raises(CheckpointError, match=r"'w' has 20 bytes .* needs 24") as e:
        SafetensorsCheckpoint.open(path)
    assert str(path) in str(e.value)


def test_unknown_dtype(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "x.safetensors", {"w": ("F4", [2], b"\0")})
    with pytest.raises(CheckpointError, match="unknown dtype 'F4'") as e:
        SafetensorsCheckpoint.open(path)
    assert str(path) in str(e.value)


@pytest.mark.parametrize(
    "entry",
    [
        "nope",
        {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]},
        {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]},
        {"dtype": "F32", "shape": [1]},
    ],
)
def test_malformed_entry(tmp_path: Path, entry: object) -> None:
    path = write_header(tmp_path / "x.safetensors", {"w": entry}, b"\0" * 4)
    with pytest.raises(CheckpointError, match=str(path)):
        SafetensorsCheckpoint.open(path)


def test_missing_shard(sharded_dir: Path) -> None:
    (sharded_dir / "m-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="missing shard") as e:
        SafetensorsCheckpoint.open(sharded_dir)
    assert "m-00002.safetensors" in str(e.value)


def test_index_tensor_not_in_shard(sharded_dir: Path) -> None:
    index_path = sharded_dir / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"]["ghost"] = "m-00001.safetensors"
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="'ghost'") as e:
        SafetensorsCheckpoint.open(sharded_dir)
    assert "m-00001.safetensors" in str(e.value)


def test_invalid_index(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors.index.json").write_text('{"metadata": {}}')
    with pytest.raises(CheckpointError, match="index"):
        SafetensorsCheckpoint.open(tmp_path)


def test_no_safetensors_in_directory(tmp_path: Path) -> None:
    (tmp_path / "pytorch_model.bin").write_bytes(b"\0")
    with pytest.raises(CheckpointError, match="no safetensors files") as e:
        SafetensorsCheckpoint.open(tmp_path)
    assert str(tmp_path) in str(e.value)


def test_nonexistent_path(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no such"):
        SafetensorsCheckpoint.open(tmp_path / "nope.safetensors")


# -- checkpoint_dtype ---------------------------------------------------------


def test_checkpoint_dtype_picks_float_with_most_bytes(tmp_path: Path) -> None:
    bf16 = np.zeros(100, dtype=ml_dtypes.bfloat16)
    path = write_raw(
        tmp_path / "x.safetensors",
        {
            "big_int": ("I64", [1000], np.zeros(1000, dtype=np.int64).tobytes()),
            "w": ("BF16", [100], bf16.tobytes()),
            "norm": ("F32", [10], np.zeros(10, dtype=np.float32).tobytes()),
            "norm2": ("F32", [10], np.zeros(10, dtype=np.float32).tobytes()),
        },
    )
    assert checkpoint_dtype(SafetensorsCheckpoint.open(path)) == ir.DataType.BFLOAT16


def test_checkpoint_dtype_sums_bytes_per_dtype(tmp_path: Path) -> None:
    arrays = {f"f32_{i}": np.zeros(10, dtype=np.float32) for i in range(5)}  # 200 bytes
    arrays["f16"] = np.zeros(60, dtype=np.float16)  # 120 bytes, the largest single tensor
    save_file(arrays, tmp_path / "x.safetensors")
    assert (
        checkpoint_dtype(SafetensorsCheckpoint.open(tmp_path / "x.safetensors"))
        == ir.DataType.FLOAT
    )


def test_checkpoint_dtype_none_without_floats(tmp_path: Path) -> None:
    save_file({"ids": np.arange(3, dtype=np.int64)}, tmp_path / "x.safetensors")
    assert checkpoint_dtype(SafetensorsCheckpoint.open(tmp_path / "x.safetensors")) is None
