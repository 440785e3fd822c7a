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
import onnxruntime as ort
import pytest

from mobius.errors import CheckpointError
from mobius.weights._gguf import GGUFFile
from mobius.weights._gguf_quant import matmul_nbits_nodes
from mobius_text.testing import write_gguf

Q = gguf.GGMLQuantizationType
rng = np.random.default_rng(0)


def _quantized(shape, qtype, zero_row=True):
    """Random weights quantized by gguf, with an all-zero row (d == 0) and a constant block."""
    w = rng.standard_normal(shape).astype(np.float32)
    if zero_row:
        w[1] = 0.0
        w[2, :32] = 0.75  # Q4_1: d == 0 and m == 0.75
    return gguf.quants.quantize(w, qtype), qtype


def _run(weight, x: np.ndarray, accuracy_level: int = 0) -> np.ndarray:
    """Run ``x @ W`` of a repacked weight as MatMulNBits in ONNX Runtime on CPU."""
    x_value = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(x.shape))
    nodes, inits, out = matmul_nbits_nodes(x_value, weight, "w", accuracy_level)
    out.name = "y"
    graph = ir.Graph(
        [x_value],
        [out],
        nodes=nodes,
        initializers=inits,
        opset_imports={"": 21, "com.microsoft": 1},
    )
    proto = ir.serde.serialize_model(ir.Model(graph, ir_version=10))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


# -- dequantization and repacking on small files written by gguf ------------------


@pytest.mark.parametrize(
    "qtype",
    [Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.Q4_K, Q.Q6_K],
    ids=lambda q: q.name,
)
def test_dequantize_matches_gguf(tmp_path, qtype):
    shape = (4, 512)
    if qtype in (Q.Q4_K, Q.Q6_K):  # gguf has no quantizer for these: random blocks
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, (shape[0], shape[1] // block, size), dtype=np.uint8)
        fp16 = rng.uniform(-0.1, 0.1, raw.shape[:2] + (2,)).astype(np.float16).view(np.uint8)
        if qtype == Q.Q4_K:
            raw[..., 0:4] = fp16.reshape(*raw.shape[:2], 4)  # d and dmin
        else:
            raw[..., 208:210] = fp16[..., :2]  # d
        data = raw.reshape(shape[0], -1)
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


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q8_0], ids=lambda q: q.name)
def test_repacked_blocks_run_in_onnxruntime(tmp_path, qtype):
    path = write_gguf(tmp_path / "w.gguf", "llama", {}, {"w": _quantized((48, 96), qtype)})
    with GGUFFile.open(path) as file:
        tensor = file.tensors["w"]
        dense, repacked = tensor.numpy(), tensor.repack()
    assert repacked.bits == (8 if qtype == Q.Q8_0 else 4) and repacked.block_size == 32
    assert repacked.packed.shape == (48, 3, 32 if qtype == Q.Q8_0 else 16)
    assert (repacked.offsets is not None) == (qtype == Q.Q4_1)
    np.testing.assert_allclose(repacked.dequantize(), dense.T, rtol=1e-6, atol=1e-7)
    x = rng.standard_normal((2, 5, 96)).astype(np.float32)
    np.testing.assert_allclose(_run(repacked, x), x @ dense.T, rtol=0, atol=1e-4)


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q8_0], ids=lambda q: q.name)
def test_repacked_table_serves_gather_block_quantized(tmp_path, qtype):
    # A tied embedding table can share its repacked blocks between the head's
    # MatMulNBits and the token lookup: same bytes, same default zero point.
    path = write_gguf(tmp_path / "e.gguf", "llama", {}, {"e": _quantized((20, 64), qtype)})
    with GGUFFile.open(path) as file:
        dense, table = file.tensors["e"].numpy(), file.tensors["e"].repack()
    ids = np.array([[3, 0, 19, 2]], np.int64)
    ids_value = ir.Value(name="ids", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([1, 4]))
    data = ir.Value(name="data", const_value=ir.Tensor(table.packed.reshape(table.n, -1)))
    scales = ir.Value(name="scales", const_value=ir.Tensor(table.scales))
    attributes = {"bits": table.bits, "block_size": 32, "gather_axis": 0, "quantize_axis": 1}
    node = ir.node(
        "GatherBlockQuantized", [data, ids_value, scales], attributes, domain="com.microsoft"
    )
    node.outputs[0].name = "y"
    graph = ir.Graph(
        [ids_value],
        node.outputs,
        nodes=[node],
        initializers=[data, scales],
        opset_imports={"": 21, "com.microsoft": 1},
    )
    proto = ir.serde.serialize_model(ir.Model(graph, ir_version=10))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"ids": ids})[0], dense[ids], rtol=1e-6, atol=0)


def test_other_types_are_not_repacked(tmp_path):
    path = write_gguf(
        tmp_path / "w.gguf", "llama", {}, {"a": _quantized((4, 64), Q.Q5_0), "b": np.ones(64)}
    )
    with GGUFFile.open(path) as file:
        assert file.tensors["a"].repack() is None and file.tensors["b"].repack() is None


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
