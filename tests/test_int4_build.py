"""`mobius build --quant int4` end to end: the int4 graph equals the dequantized fp32 model."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from mobius import build
from mobius.cli import main
from mobius.passes import dequantize_blocks, quantize_blocks, quantize_int4
from mobius_text.testing import tiny_llama_tensors, write_tiny_llama


def _logits(model_path, input_ids):
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    feeds = {
        "input_ids": input_ids,
        "attention_mask": np.ones_like(input_ids),
        "position_ids": np.arange(input_ids.shape[1], dtype=np.int64)[None],
    }
    for inp in session.get_inputs():
        if inp.name.startswith("past_key_values"):
            feeds[inp.name] = np.zeros((1, inp.shape[1], 0, inp.shape[3]), np.float32)
    return session.run(["logits"], feeds)[0], session


def _sensitive(name: str) -> bool:
    """The tiny llama's weights ``--quant-mix sensitive`` keeps at 8 bits: the head, and
    layer 1's v/down (of 2 layers, llama.cpp's mixes give the last more bits)."""
    return (
        name == "lm_head.weight"
        or name.startswith("model.layers.1.")
        and ("v_proj" in name or "down_proj" in name)
    )


@pytest.mark.parametrize(
    "flags, method, symmetric, bits_of",
    [
        # round-to-nearest, symmetric, every weight at 4 bits: the former default
        (["--symmetric"], "rtn", True, lambda name: 4),
        ([], "rtn", False, lambda name: 4),  # the default: a zero point per block, all 4-bit
        (["--quant-mix", "sensitive"], "rtn", False, lambda n: 8 if _sensitive(n) else 4),
        (["--quant-method", "hqq"], "hqq", False, lambda name: 4),
        (["--quant", "int8"], "rtn", True, lambda name: 8),
    ],
    ids=["rtn-symmetric", "default", "sensitive-mix", "hqq", "int8"],
)
def test_quant_build_equals_the_dequantized_checkpoint(
    tmp_path, capsys, flags, method, symmetric, bits_of
):
    tensors = tiny_llama_tensors()
    write_tiny_llama(tmp_path / "hf", tensors)
    quant = [] if "--quant" in flags else ["--quant", "int4"]
    argv = ["build", "--model", str(tmp_path / "hf"), str(tmp_path / "q"), *quant, *flags]
    assert main([*argv, "--accuracy-level", "0", "--quiet"]) == 0

    # The same model with every projection replaced by what its blocks stand for.
    dequantized = {}
    for name, array in tensors.items():
        if array.ndim == 2 and name != "model.embed_tokens.weight":  # [out, in] projections
            bits = bits_of(name)
            packed, scales, zero_points = quantize_blocks(
                array.T, 32, symmetric, bits=bits, method=method
            )
            array = np.ascontiguousarray(
                dequantize_blocks(packed, scales, zero_points, array.shape[1], bits).T
            )
        dequantized[name] = array
    write_tiny_llama(tmp_path / "dequantized", dequantized)
    assert (
        main(["build", "--model", str(tmp_path / "dequantized"), str(tmp_path / "f32"), "--quiet"])
        == 0
    )

    input_ids = np.array([[1, 7, 13, 42, 63]], dtype=np.int64)
    quantized_logits, session = _logits(tmp_path / "q" / "model.onnx", input_ids)
    f32_logits, _ = _logits(tmp_path / "f32" / "model.onnx", input_ids)
    np.testing.assert_allclose(quantized_logits, f32_logits, atol=1e-4)
    graph = onnx.load(str(tmp_path / "q" / "model.onnx"), load_external_data=False).graph
    nbits = [node for node in graph.node if node.op_type == "MatMulNBits"]
    assert len(nbits) == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer + head
    assert "MatMul" not in [node.op_type for node in graph.node]
    widths = sorted(onnx.helper.get_node_attr_value(n, "bits") for n in nbits)
    assert widths == sorted(bits_of(name) for name in tensors if _projection(name))


def _projection(name: str) -> bool:
    return name.endswith("proj.weight") or name == "lm_head.weight"


def test_quant_without_weights_is_a_one_line_error(tmp_path, capsys):
    write_tiny_llama(tmp_path / "hf")
    code = main(
        [
            "build",
            "--model",
            str(tmp_path / "hf"),
            str(tmp_path / "out"),
            "--quant",
            "int4",
            "--no-weights",
            "--quiet",
        ]
    )
    assert code == 1
    assert "quantization needs the weights" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _int4_table(table, block_size, symmetric):
    """An embedding table ``[vocab, hidden]`` as its int4 rows stand for it."""
    packed, scales, zero_points = quantize_blocks(table.T, block_size, symmetric)
    return np.ascontiguousarray(dequantize_blocks(packed, scales, zero_points, table.shape[1]).T)


def _dequantized_projections(tensors, block_size, symmetric):
    out = {}
    for name, array in tensors.items():
        if array.ndim == 2 and name != "model.embed_tokens.weight":  # [out, in] projections
            packed, scales, zero_points = quantize_blocks(array.T, block_size, symmetric)
            array = np.ascontiguousarray(
                dequantize_blocks(packed, scales, zero_points, array.shape[1]).T
            )
        out[name] = array
    return out


def _build_int4(source, target, **options):
    """``mobius.build`` then the int4 pass with ``options`` (the CLI does not expose them yet)."""
    package = build(str(source))
    for model in package.models.values():
        quantize_int4(model, accuracy_level=0, **options)
    package.save(target, progress=False)
    return target / "model.onnx"


def _int4_bytes(n: int, k: int, block_size: int, symmetric: bool) -> int:
    """Bytes of a weight's int4 parts: packed codes, float32 scales, packed zero points."""
    blocks = -(-k // block_size)
    zero_points = 0 if symmetric else n * ((blocks + 1) // 2)
    return n * blocks * block_size // 2 + n * blocks * 4 + zero_points


def _nbytes(init) -> int:
    return int(np.prod(init.dims)) * onnx.helper.tensor_dtype_to_np_dtype(init.data_type).itemsize


VOCAB = 512  # large enough that a second int4 copy of the table stands out in the file


@pytest.mark.parametrize(
    ("embeddings", "block_size", "symmetric"),
    [(False, 32, True), (True, 32, True), (True, 64, False)],
)
def test_tied_int4_build_equals_its_dequantized_checkpoint(
    tmp_path, embeddings, block_size, symmetric
):
    tensors = tiny_llama_tensors()
    tensors.pop("lm_head.weight")
    table = (0.2 * np.random.default_rng(1).standard_normal((VOCAB, 32))).astype(np.float32)
    tensors["model.embed_tokens.weight"] = table
    write_tiny_llama(tmp_path / "hf", tensors, vocab_size=VOCAB, tie_word_embeddings=True)
    options = {"block_size": block_size, "symmetric": symmetric}
    int4_path = _build_int4(tmp_path / "hf", tmp_path / "int4", embeddings=embeddings, **options)

    # The fp32 model of what the int4 file stands for: a quantized head, and a
    # quantized table for the Gather too when the embeddings are quantized.
    dequantized = _dequantized_projections(tensors, block_size, symmetric)
    int4_table = _int4_table(table, block_size, symmetric)
    if embeddings:
        dequantized["model.embed_tokens.weight"] = int4_table
        config = {"tie_word_embeddings": True}
    else:  # the Gather still reads the float table: untie it from the head
        dequantized["lm_head.weight"] = int4_table
        config = {}
    write_tiny_llama(tmp_path / "dequantized", dequantized, vocab_size=VOCAB, **config)
    f32 = ["build", "--model", str(tmp_path / "dequantized"), str(tmp_path / "f32"), "--quiet"]
    assert main(f32) == 0

    input_ids = np.array([[1, 7, 130, 42, 511, 300]], dtype=np.int64)
    int4_logits, _ = _logits(int4_path, input_ids)
    f32_logits, _ = _logits(tmp_path / "f32" / "model.onnx", input_ids)
    np.testing.assert_allclose(int4_logits, f32_logits, atol=1e-3)

    graph = onnx.load(str(int4_path), load_external_data=False).graph
    op_types = [node.op_type for node in graph.node]
    assert op_types.count("MatMulNBits") == 2 * 7 + 1 and "Gemm" not in op_types
    assert op_types.count("GatherBlockQuantized") == int(embeddings)
    # The table is stored once: int4 alone when the embeddings are quantized,
    # else float for the Gather plus int4 for the head.
    expected = sum(
        _int4_bytes(*array.shape, block_size, symmetric) if array.ndim == 2 else array.nbytes
        for name, array in tensors.items()
        if name != "model.embed_tokens.weight"
    )
    table_int4 = _int4_bytes(VOCAB, 32, block_size, symmetric)
    expected += table_int4 + (0 if embeddings else table.nbytes)
    weights = [init for init in graph.initializer if init.name.startswith("model.")]
    assert sum(_nbytes(init) for init in weights) == expected
    # ... and the data file holds those tensors, not another copy besides them.
    data_bytes = (int4_path.parent / "model.onnx.data").stat().st_size
    external = sum(_nbytes(init) for init in graph.initializer if init.data_location == 1)
    assert external <= data_bytes < external + table_int4


def test_lm_head_off_keeps_the_untied_head_float(tmp_path):
    write_tiny_llama(tmp_path / "hf")
    int4_path = _build_int4(tmp_path / "hf", tmp_path / "int4", lm_head=False)
    graph = onnx.load(str(int4_path), load_external_data=False).graph
    op_types = [node.op_type for node in graph.node]
    assert op_types.count("MatMulNBits") == 2 * 7 and op_types.count("MatMul") == 1
    assert "lm_head.weight" in {init.name for init in graph.initializer}
