"""The GGUF reader: parsing, config and names, dequantization, MatMulNBits repacking, corrupt files.

Reference implementations are the ``gguf`` package (llama.cpp's own Python code,
used here to write files and as the dequantization reference) and transformers'
GGUF loader (config and HF tensors of the real SmolLM2 file).
"""

from __future__ import annotations

import struct
from collections import Counter

import gguf
import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

from mobius.errors import CheckpointError, ModelSourceError
from mobius.testing import smollm2_gguf, write_gguf
from mobius.weights import checkpoint_dtype
from mobius.weights._gguf import GGUFFile
from mobius.weights._gguf_config import gguf_config
from mobius.weights._gguf_hf import GGUFCheckpoint
from mobius.weights._gguf_quant import matmul_nbits_nodes

Q = gguf.GGMLQuantizationType
rng = np.random.default_rng(0)


def _quantized(shape, qtype, zero_row=True):
    """Random weights quantized by gguf, with an all-zero row (d == 0) and a constant block."""
    w = rng.standard_normal(shape).astype(np.float32)
    if zero_row:
        w[1] = 0.0
        w[2, :32] = 0.75  # Q4_1: d == 0 and m == 0.75
    return gguf.quants.quantize(w, qtype), qtype


# -- the real SmolLM2 file against transformers' GGUF loader -----------------------


@pytest.fixture(scope="module")
def smollm2():
    with GGUFCheckpoint.open(smollm2_gguf()) as checkpoint:
        yield checkpoint


_LLAMA_LAYER = [
    "input_layernorm",
    "post_attention_layernorm",
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
]


class _LlamaNames:
    """What transformers' GGUF loader reads of a model: its config and parameter names.

    Stands in for ``LlamaForCausalLM`` on the meta device, whose import alone takes
    longer than this whole test.
    """

    def __init__(self, layers: int) -> None:
        from types import SimpleNamespace

        self.config = SimpleNamespace(model_type="llama", num_hidden_layers=layers)
        names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
        names += [f"model.layers.{i}.{p}.weight" for i in range(layers) for p in _LLAMA_LAYER]
        self._names = names

    def state_dict(self):
        return dict.fromkeys(self._names)

    def named_children(self):
        return []


def test_smollm2_config_and_tensors_match_transformers(smollm2):
    # transformers' GGUF loader returns torch tensors (torch is a test dependency).
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    types = Counter(t.type_name for t in smollm2.file.tensors.values())
    assert types == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    reference = load_gguf_checkpoint(
        str(smollm2_gguf()), return_tensors=True, model_to_load=_LlamaNames(30)
    )
    expected = {k: v for k, v in reference["config"].items() if k != "_model_name_or_path"}
    expected.pop("unk_token_id")  # not a config.json field mobius needs
    assert checkpoint_dtype(smollm2) == ir.DataType.FLOAT  # blocks decode to float32
    assert {k: smollm2.config.get(k) for k in expected} == expected
    assert smollm2.config["tie_word_embeddings"] is True and "lm_head.weight" not in smollm2
    tensors = reference["tensors"]
    assert set(smollm2) == set(tensors)
    for name, weight in smollm2.items():
        array = weight.numpy()
        assert array.dtype == np.float32 and array.shape == weight.shape
        np.testing.assert_array_equal(array, tensors[name].numpy(), err_msg=name)


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


def test_smollm2_repacked_weights_run_in_onnxruntime(smollm2):
    for name, bits in [
        ("model.layers.0.self_attn.q_proj.weight", 4),  # Q4_1, rows un-permuted
        ("model.layers.3.mlp.down_proj.weight", 4),
        ("model.embed_tokens.weight", 8),  # Q8_0, the tied lm_head
    ]:
        weight = smollm2[name]
        repacked = weight.repack()
        assert repacked.bits == bits and (repacked.n, repacked.k) == weight.shape
        dense = weight.numpy()
        np.testing.assert_allclose(repacked.dequantize(), dense.T, rtol=1e-6, atol=1e-7)
        rows = np.arange(min(len(dense), 2048))  # enough of the 49152 vocabulary rows
        repacked, dense = repacked.take_rows(rows), dense[rows]
        x = rng.standard_normal((2, 3, weight.shape[1])).astype(np.float32)
        np.testing.assert_allclose(_run(repacked, x), x @ dense.T, rtol=0, atol=1e-4)


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


# -- names, the llama Q/K permutation, Gemma norms, configs -----------------------

_LLAMA_META = {
    "llama.block_count": 1,
    "llama.embedding_length": 64,
    "llama.feed_forward_length": 96,
    "llama.attention.head_count": 4,
    "llama.attention.head_count_kv": 2,
    "llama.rope.dimension_count": 16,
    "llama.context_length": 128,
    "llama.attention.layer_norm_rms_epsilon": 1e-5,
    "llama.rope.freq_base": 10000.0,
}


def _llama_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """What llama.cpp's converter (``LlamaModel.permute``) does to HF Q/K rows."""
    return (
        w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


def test_llama_qk_rows_are_unpermuted_for_floats_and_blocks(tmp_path):
    q = rng.standard_normal((64, 64)).astype(np.float32)
    k = rng.standard_normal((32, 64)).astype(np.float32)
    k_blocks = gguf.quants.quantize(_llama_permute(k, 2), Q.Q8_0)
    tensors = {
        "blk.0.attn_q.weight": _llama_permute(q, 4),
        "blk.0.attn_k.weight": (k_blocks, Q.Q8_0),
        "token_embd.weight": np.ones((10, 64), np.float32),
    }
    path = write_gguf(tmp_path / "l.gguf", "llama", _LLAMA_META, tensors)
    with GGUFCheckpoint.open(path) as checkpoint:
        np.testing.assert_array_equal(
            checkpoint["model.layers.0.self_attn.q_proj.weight"].numpy(), q
        )
        weight = checkpoint["model.layers.0.self_attn.k_proj.weight"]
        k_hf = gguf.quants.dequantize(k_blocks, Q.Q8_0)[_inverse(_llama_permute(np.arange(32), 2))]
        np.testing.assert_array_equal(weight.numpy(), k_hf)
        np.testing.assert_array_equal(weight.repack().dequantize(), k_hf.T)
        assert isinstance(weight.load(repack=False), np.ndarray)
        assert checkpoint.config["vocab_size"] == 10 and checkpoint.config["head_dim"] == 16


def _inverse(order: np.ndarray) -> np.ndarray:
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    return inverse


def test_gemma_norms_lose_their_offset_and_get_their_names(tmp_path):
    meta = {k.replace("llama.", "gemma2."): v for k, v in _LLAMA_META.items()}
    tensors = {
        "blk.0.ffn_norm.weight": np.full(64, 1.5, np.float32),
        "blk.0.post_ffw_norm.weight": np.full(64, 0.25, np.float32),
        "blk.0.attn_q.weight": np.eye(64, dtype=np.float32),
    }
    path = write_gguf(tmp_path / "g.gguf", "gemma2", meta, tensors)
    with GGUFCheckpoint.open(path) as checkpoint:
        assert checkpoint["model.layers.0.pre_feedforward_layernorm.weight"].numpy()[0] == 0.5
        assert checkpoint["model.layers.0.post_feedforward_layernorm.weight"].numpy()[0] == -0.75
        q = checkpoint["model.layers.0.self_attn.q_proj.weight"].numpy()
        np.testing.assert_array_equal(q, np.eye(64))  # not permuted: gemma uses NeoX rotary


def _llama_cpp_rope_freqs(theta, dim, factor, low, high, original) -> np.ndarray:
    """llama.cpp's converter (``LlamaModel.generate_extra_tensors``), step by step."""
    import math

    factors = []
    for freq in 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim):
        wavelen = 2 * math.pi / freq
        if wavelen < original / high:
            factors.append(1)
        elif wavelen > original / low:
            factors.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(factors, np.float32)


@pytest.mark.parametrize("factor, high", [(32.0, 4.0), (8.0, 2.0)])
def test_llama3_rope_freqs_become_rope_scaling(tmp_path, factor, high):
    import torch  # transformers' rotary code is the reference
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    meta = _LLAMA_META | {"llama.rope.freq_base": 500000.0, "llama.rope.dimension_count": 64}
    meta |= {"llama.embedding_length": 256}  # 4 heads of 64
    freqs = _llama_cpp_rope_freqs(500000.0, 64, factor, 1.0, high, 8192)
    tensors = {"rope_freqs.weight": freqs, "token_embd.weight": np.ones((10, 256), np.float32)}
    path = write_gguf(tmp_path / "l3.gguf", "llama", meta, tensors)
    with GGUFCheckpoint.open(path) as checkpoint:
        config = checkpoint.config
        assert "rope_freqs.weight" not in checkpoint
    assert config["rope_scaling"] == {
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": 1.0,
        "high_freq_factor": high,
        "original_max_position_embeddings": 8192,
    }
    hf_config = transformers.AutoConfig.for_model(**config)
    inv_freq, _ = ROPE_INIT_FUNCTIONS["llama3"](hf_config, torch.device("cpu"))
    plain = 1.0 / 500000.0 ** (np.arange(0, 64, 2) / 64)
    np.testing.assert_allclose(inv_freq.numpy(), plain / freqs, rtol=1e-5)


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "gemma2", "gemma3", "phi3"])
def test_configs_match_transformers(tmp_path, arch):
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    meta = {k.replace("llama.", f"{arch}."): v for k, v in _LLAMA_META.items()}
    meta |= {f"{arch}.attention.key_length": 32, f"{arch}.attention.value_length": 32}
    meta |= {f"{arch}.attention.sliding_window": 64, "tokenizer.ggml.bos_token_id": 3}
    tensors = {"token_embd.weight": np.ones((10, 64), np.float32)}
    if arch == "phi3":
        tensors["blk.0.ffn_up.weight"] = np.ones((192, 64), np.float32)
    path = write_gguf(tmp_path / f"{arch}.gguf", arch, meta, tensors)
    with GGUFCheckpoint.open(path) as checkpoint:
        config = checkpoint.config
        if arch == "phi3":
            assert "model.layers.0.mlp.gate_up_proj.weight" in checkpoint
    expected = load_gguf_checkpoint(str(path))["config"]
    expected.pop("_model_name_or_path", None)
    assert {k: config.get(k) for k in expected} == expected
    assert config["head_dim"] == 32 and config["partial_rotary_factor"] == 0.5


def test_unsupported_architecture_is_a_clear_error(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", "mamba", {}, {"t": np.ones(32, np.float32)})
    with GGUFFile.open(path) as file, pytest.raises(ModelSourceError, match="'mamba' is not"):
        gguf_config(file)


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
