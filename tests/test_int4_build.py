"""`mobius build --quant int4` end to end: the int4 graph equals the dequantized fp32 model."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from mobius.cli import main
from mobius.passes import dequantize_blocks, quantize_blocks
from mobius.testing import tiny_llama_tensors, write_tiny_llama


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


def test_int4_build_equals_the_dequantized_checkpoint(tmp_path, capsys):
    tensors = tiny_llama_tensors()
    write_tiny_llama(tmp_path / "hf", tensors)
    assert (
        main(
            [
                "build",
                "--model",
                str(tmp_path / "hf"),
                str(tmp_path / "int4"),
                "--quant",
                "int4",
                "--accuracy-level",
                "0",
                "--quiet",
            ]
        )
        == 0
    )

    # The same model with every projection replaced by what its int4 blocks stand for.
    dequantized = {}
    for name, array in tensors.items():
        if array.ndim == 2 and name != "model.embed_tokens.weight":  # [out, in] projections
            packed, scales, zero_points = quantize_blocks(array.T, 32, True)
            array = np.ascontiguousarray(
                dequantize_blocks(packed, scales, zero_points, array.shape[1]).T
            )
        dequantized[name] = array
    write_tiny_llama(tmp_path / "dequantized", dequantized)
    assert (
        main(["build", "--model", str(tmp_path / "dequantized"), str(tmp_path / "f32"), "--quiet"])
        == 0
    )

    input_ids = np.array([[1, 7, 13, 42, 63]], dtype=np.int64)
    int4_logits, session = _logits(tmp_path / "int4" / "model.onnx", input_ids)
    f32_logits, _ = _logits(tmp_path / "f32" / "model.onnx", input_ids)
    np.testing.assert_allclose(int4_logits, f32_logits, atol=1e-4)
    import onnx

    graph = onnx.load(str(tmp_path / "int4" / "model.onnx"), load_external_data=False).graph
    op_types = [node.op_type for node in graph.node]
    assert op_types.count("MatMulNBits") == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer + head
    assert "MatMul" not in op_types


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
