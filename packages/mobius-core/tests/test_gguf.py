"""The generic GGUF reader: parsing, dequantization, MatMulNBits repacking, corrupt files.

The reference implementation is the ``gguf`` package (llama.cpp's own Python
code, used here to write files and as the dequantization reference). What
llama.cpp's converter does to each family (config, names, permutations) is
mobius-text's, tested there.
"""

from __future__ import annotations

import struct

import gguf
import numpy as np
import onnx_ir as ir
import pytest

from mobius.errors import CheckpointError
from mobius.testing import run_kept_blocks
from mobius.weights._gguf import GGUFFile
from mobius_text.testing import BLOCK_TYPE_NAMES, random_blocks, write_gguf

Q = gguf.GGMLQuantizationType
rng = np.random.default_rng(0)


def _quantized(shape, qtype, zero_row=True):
    """Random weights quantized by gguf, with an all-zero row (d == 0) and a constant block."""
    w = rng.standard_normal(shape).astype(np.float32)
    if zero_row:
        w[1] = 0.0
        w[2, :32] = 0.75  # Q4_1: d == 0 and m == 0.75
    return gguf.quants.quantize(w, qtype), qtype


BLOCK_TYPES = [Q[name] for name in BLOCK_TYPE_NAMES]


def _random_blocks(shape, qtype) -> np.ndarray:
    return random_blocks(shape, qtype.name, seed=int(rng.integers(1 << 30)))[0]


# -- dequantization and repacking on small files written by gguf ------------------


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16, *BLOCK_TYPES], ids=lambda q: q.name)
def test_dequantize_matches_gguf(tmp_path, qtype):
    # Every value equals the gguf package's dequantization (llama.cpp's reference) to the bit.
    shape = (4, 512)
    if qtype in BLOCK_TYPES:
        data = _random_blocks(shape, qtype)
    elif qtype in (Q.F32, Q.F16):
        data = rng.standard_normal(shape).astype(np.float32 if qtype == Q.F32 else np.float16)
    else:
        data, _ = _quantized(shape, qtype)
    path = write_gguf(tmp_path / "t.gguf", "llama", {}, {"t": (data, qtype)})
    with GGUFFile.open(path) as file:
        tensor = file.tensors["t"]
        assert tensor.shape == shape and tensor.type_name == qtype.name
        mine = tensor.numpy()
    expected = gguf.quants.dequantize(data, qtype).reshape(shape).astype(np.float32)
    assert mine.dtype == np.float32
    np.testing.assert_array_equal(mine, expected)


@pytest.mark.parametrize("qtype", BLOCK_TYPES, ids=lambda q: q.name)
def test_kept_blocks_compute_the_dequantized_weight(tmp_path, qtype):
    # x @ W in MatMulNBits and table[ids] in GatherBlockQuantized, from the blocks as
    # they are (widened to 8 bits or to blocks of 16 where the type needs it).
    weights = {"w": (_random_blocks((48, 512), qtype), qtype)}
    weights["e"] = (_random_blocks((20, 512), qtype), qtype)
    path = write_gguf(tmp_path / "w.gguf", "llama", {}, weights)
    x = rng.standard_normal((2, 5, 512)).astype(np.float32)
    ids = np.array([[3, 0, 19, 2]], np.int64)
    with GGUFFile.open(path) as file:
        w, e = file.tensors["w"], file.tensors["e"]
        out = run_kept_blocks(matmul=w, x=x, table=e, ids=ids)
        dense_w, dense_e = w.numpy(), e.numpy()
        repacked = w.repack()
    np.testing.assert_array_equal(repacked.dequantize(), dense_w.T)
    np.testing.assert_array_equal(out["rows"], dense_e[ids])  # the same values, gathered
    expected = x @ dense_w.T
    # The same weights, summed in another order: measured below 1e-6 of the largest output.
    assert np.abs(out["y"] - expected).max() <= 2e-6 * np.abs(expected).max()
    graph = out["model"].graph
    assert {"MatMulNBits", "GatherBlockQuantized"} <= {n.op_type for n in graph}
    # Stored: the blocks' codes and their own fields, never a float32 copy.
    assert all(v.dtype != ir.DataType.FLOAT for v in graph.initializers.values())


def test_float_and_higher_rank_tensors_are_not_repacked(tmp_path):
    experts = rng.standard_normal((2, 4, 64)).astype(np.float32)
    path = write_gguf(
        tmp_path / "w.gguf",
        "llama",
        {},
        {
            "a": (gguf.quants.quantize(experts, Q.Q8_0), Q.Q8_0),
            "b": np.ones(64, np.float32),
            "c": np.ones((4, 64), np.float16),
        },
    )
    with GGUFFile.open(path) as file:
        for name in "abc":
            assert not file.tensors[name].repackable and file.tensors[name].repack() is None


# -- corrupt files -----------------------------------------------------------------


@pytest.fixture
def valid_bytes(tmp_path) -> bytes:
    meta = {"general.name": "tiny", "tokenizer.ggml.tokens": ["a", "bb", "ccc"]}
    tensors = {"blk.0.attn_q.weight": _quantized((4, 64), Q.Q4_0, zero_row=False)}
    return write_gguf(tmp_path / "valid.gguf", "llama", meta, tensors).read_bytes()


def _tensor_info_at(data: bytes) -> int:
    """Byte offset of the n_dims field of the tensor info (after its name)."""
    name = b"blk.0.attn_q.weight"
    return data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)


def _array_count_at(data: bytes) -> int:
    """Byte offset of the element count of the ``tokenizer.ggml.tokens`` array."""
    key = b"tokenizer.ggml.tokens"
    return data.index(key) + len(key) + 4 + 4  # value type ARRAY, element type STRING


def _set(data: bytes, at: int, fmt: str, value) -> bytes:
    return data[:at] + struct.pack(fmt, value) + data[at + struct.calcsize(fmt) :]


CORRUPTIONS = {
    "empty": (lambda d: b"", "not a GGUF file"),
    "bad magic": (lambda d: b"GGML" + d[4:], "not a GGUF file"),
    "version 1": (lambda d: _set(d, 4, "<I", 1), "version 1 is not supported"),
    "big-endian": (lambda d: _set(d, 4, ">I", 3), "big-endian"),
    "absurd tensor count": (lambda d: _set(d, 8, "<Q", 1 << 60), "tensor count is"),
    "tensor count past the end": (lambda d: _set(d, 8, "<Q", 1000), "more than the file"),
    "absurd metadata count": (lambda d: _set(d, 16, "<Q", 1 << 40), "metadata count is"),
    "header cut short": (lambda d: d[:80], "truncated"),
    "counts past the end": (lambda d: d[:60], "metadata count is 3, more than"),
    "huge string": (lambda d: _set(d, 24, "<Q", 1 << 62), "bytes long"),
    "huge array": (lambda d: _set(d, _array_count_at(d), "<Q", 1 << 30), "at most 16777216"),
    "rank 5": (lambda d: _set(d, _tensor_info_at(d), "<I", 5), "rank 5"),
    "unknown type": (lambda d: _set(d, _tensor_info_at(d) + 20, "<I", 99), "unknown GGML type 99"),
    "offset past EOF": (lambda d: _set(d, _tensor_info_at(d) + 24, "<Q", 1 << 20), "truncated"),
    "unaligned offset": (lambda d: _set(d, _tensor_info_at(d) + 24, "<Q", 3), "aligned"),
    "partial block": (lambda d: _set(d, _tensor_info_at(d) + 4, "<Q", 48), "whole Q4_0 blocks"),
    "data cut short": (lambda d: d[:-40], "truncated"),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_corrupt_files_raise_one_clear_line(tmp_path, valid_bytes, case):
    corrupt, message = CORRUPTIONS[case]
    path = tmp_path / "bad.gguf"
    path.write_bytes(corrupt(valid_bytes))
    with pytest.raises(CheckpointError, match=message) as info:
        GGUFFile.open(path)
    text = str(info.value)
    assert text.startswith(f"{path}: ") and "\n" not in text


def test_valid_file_parses_and_missing_file_is_an_error(tmp_path, valid_bytes):
    path = tmp_path / "ok.gguf"
    path.write_bytes(valid_bytes)
    with GGUFFile.open(path) as file:
        assert file.version == 3 and file.metadata["tokenizer.ggml.tokens"] == ["a", "bb", "ccc"]
        assert file.architecture == "llama" and file.tensors["blk.0.attn_q.weight"].shape == (4, 64)
    with pytest.raises(CheckpointError, match="cannot read"):
        GGUFFile.open(tmp_path / "nope.gguf")
