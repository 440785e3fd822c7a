"""GGUF blocks pass through to ``MatMulNBits``: SmolLM2's Q4_1 and Q8_0 weights, unchanged.

The passthrough int4 model must compute what the fp32 model built from the same
file (blocks dequantized) computes: the same numbers, summed in another order.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

from mobius._build import build
from mobius.passes import quantize_int4
from mobius.passes._blocks import probe
from mobius.passes._int4_pass import CONCAT_OF
from mobius_text.gguf import GGUFCheckpoint, GGUFWeight
from mobius_text.testing import smollm2_gguf

PROMPT = [1, 504, 3575, 282, 4649, 314, 253, 1789, 30, 378, 2]
LAYERS = 30


def _session(directory: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return ort.InferenceSession(
        str(directory / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )


def _greedy(session: ort.InferenceSession, steps: int) -> tuple[list[int], np.ndarray]:
    """Greedy tokens of a plain KV-cache loop, and the prompt's logits."""
    inputs = {i.name: i for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    past = {
        name: np.zeros((1, i.shape[1], 0, 64), np.float32)
        for name, i in inputs.items()
        if name.startswith("past_key_values")
    }
    tokens = np.array([PROMPT], np.int64)
    mask, positions = np.ones_like(tokens), np.arange(len(PROMPT))[None]
    out, first = [], None
    for _ in range(steps):
        feed = {"input_ids": tokens, "attention_mask": mask, "position_ids": positions, **past}
        result = dict(zip(names, session.run(None, feed), strict=True))
        first = result["logits"] if first is None else first
        out.append(int(result["logits"][0, -1].argmax()))
        past = {
            n.replace("present", "past_key_values", 1): v
            for n, v in result.items()
            if n.startswith("present")
        }
        tokens = np.array([[out[-1]]], np.int64)
        positions = positions[:, -1:] + 1
        mask = np.concatenate([mask, np.ones((1, 1), np.int64)], axis=1)
    return out, first


def _nbits_nodes(model: ir.Model) -> dict[str, ir.Node]:
    """``MatMulNBits`` nodes by the name of the weight they stand for."""
    return {
        n.inputs[1].name.rsplit(".", 1)[0]: n for n in model.graph if n.op_type == "MatMulNBits"
    }


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    """fp32 and passthrough-int4 builds of the GGUF, saved; what the int4 save read and held."""
    root, path = tmp_path_factory.mktemp("gguf_int4"), smollm2_gguf()
    build(path, quant="none").save(root / "f32", progress=False)
    package = build(path, quant="none")
    reads = []  # (method, weight) of every GGUF weight decoded or repacked
    with GGUFCheckpoint.open(path) as checkpoint, pytest.MonkeyPatch.context() as mp:
        for method in ("numpy", "repack"):
            original = getattr(GGUFWeight, method)

            def record(self, _method=method, _original=original):
                reads.append((_method, self))
                return _original(self)

            mp.setattr(GGUFWeight, method, record)
        weights = dict(checkpoint)
        replaced = quantize_int4(
            package.models["model"], accuracy_level=0, embeddings=True, prequantized=weights
        )
        planned = list(reads)
        tracemalloc.start()
        try:
            package.save(root / "int4", progress=False)
            save_peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        types = {name: w.type_name for name, w in weights.items()}
        largest = max(w.tensor.nbytes for w in weights.values())
    return {
        "root": root,
        "replaced": replaced,
        "types": types,
        "planned": planned,
        "reads": reads,
        "largest": largest,
        "save_peak": save_peak,
        "model": ir.load(root / "int4" / "model.onnx"),
    }


@pytest.fixture(scope="module")
def reference(smollm2):
    """The fp32 model's 16 greedy tokens and prompt logits."""
    return _greedy(_session(smollm2["root"] / "f32"), 16)


def test_blocks_are_read_once_at_save_and_never_dequantized(smollm2):
    assert smollm2["planned"] == []  # the pass only plans
    repacked = [w.name for m, w in smollm2["reads"] if m == "repack"]
    decoded = [w.name for m, w in smollm2["reads"] if m == "numpy" and w.repackable]
    assert sorted(repacked) == sorted(n for n, t in smollm2["types"].items() if t != "F32")
    assert decoded == []


def test_every_linear_weight_keeps_its_gguf_blocks(smollm2):
    model, types = smollm2["model"], smollm2["types"]
    nodes = _nbits_nodes(model)
    linear = {n for n, t in types.items() if n != "model.embed_tokens.weight" and t != "F32"}
    assert len(linear) == 7 * LAYERS
    # Every projection, plus the tied head reading the Q8_0 table.
    assert set(nodes) == linear | {"model.embed_tokens.weight"}
    assert smollm2["replaced"] == len(nodes) + 1  # and the embedding lookup
    for name, node in nodes.items():
        assert node.attributes.get_int("bits") == probe(types[name]).bits, name
        assert node.attributes.get_int("block_size") == 32, name
    assert nodes["model.embed_tokens.weight"].attributes.get_int("bits") == 8
    # No float weight is left for a MatMul or Gemm (the Q4_1 offset terms read folded values).
    for node in model.graph:
        weight = node.inputs[1] if node.op_type in ("MatMul", "Gemm") else None
        assert weight is None or not weight.is_initializer(), node.name
    # The lookup shares the head's bytes.
    (gather,) = [n for n in model.graph if n.op_type == "GatherBlockQuantized"]
    assert gather.attributes.get_int("bits") == 8
    data = gather.inputs[0].producer().inputs[0]
    assert data is nodes["model.embed_tokens.weight"].inputs[1]
    assert "model.embed_tokens.weight" not in model.graph.initializers


def test_blocks_are_copied_not_requantized(smollm2):
    # A permuted llama key projection (rows un-permuted) and the Q8_0 table, byte for
    # byte: the codes, and the blocks' own fp16 scales and minimums.
    inits = smollm2["model"].graph.initializers
    with GGUFCheckpoint.open(smollm2_gguf()) as checkpoint:
        for name in ("model.layers.3.self_attn.k_proj.weight", "model.embed_tokens.weight"):
            expected = checkpoint[name].repack()
            np.testing.assert_array_equal(
                inits[f"{name}.blocks"].const_value.numpy(), expected.packed
            )
            factors = [("scale", f) for f in expected.fields.scale_factors]
            factors += [("offset", f) for f in expected.fields.offset_factors]
            for kind, i, factor in [(k, i, f) for i, (k, f) in enumerate(factors)]:
                index = i if kind == "scale" else i - len(expected.fields.scale_factors)
                stored = inits[f"{name}.{kind}{index}"].const_value.numpy()
                assert stored.dtype == factor.dtype == np.float16
                np.testing.assert_array_equal(stored.reshape(factor.shape), factor)


def test_passthrough_int4_computes_the_dequantized_gguf(smollm2, reference):
    tokens, logits = _greedy(_session(smollm2["root"] / "int4"), 16)
    ref_tokens, ref_logits = reference
    # Same values, summed in another order (measured 9e-5 on logits up to 31).
    np.testing.assert_allclose(logits, ref_logits, rtol=0, atol=1e-3)
    assert tokens == ref_tokens


def test_passthrough_stays_near_the_gguf_size_and_memory(smollm2):
    gguf_bytes = smollm2_gguf().stat().st_size
    data_bytes = (smollm2["root"] / "int4" / "model.onnx.data").stat().st_size
    # The blocks' own bytes (codes, fp16 scales and minimums): 20 bytes per 32 values,
    # as in the GGUF file (measured 1.02x with the graph's few small constants).
    assert data_bytes <= 1.05 * gguf_bytes
    # Saving repacks one weight at a time: the heap peaks near the largest tensor
    # (the 30 MB Q8_0 table), far from the 98 MB of the whole file.
    print(
        f"save heap peak {smollm2['save_peak'] / 2**20:.1f} MiB, data {data_bytes / 2**20:.1f} MiB"
    )
    assert smollm2["save_peak"] <= 2 * smollm2["largest"]


def test_packed_qkv_stacks_the_three_projections(tmp_path, smollm2, reference):
    # ``--ep cpu`` packs q/k/v into one MatMul: its weight is found either by an
    # explicit list of GGUF weights or by the packed value's ``CONCAT_OF`` record.
    path = smollm2_gguf()
    package = build(path, ep="cpu", quant="none")
    model = package.models["model"]
    with GGUFCheckpoint.open(path) as checkpoint:
        weights = dict(checkpoint)
        packed = [v for n, v in model.graph.initializers.items() if "qkv_proj" in n]
        assert len(packed) == LAYERS
        for i, value in enumerate(packed):
            q = value.name.removesuffix(".packed").replace("qkv_proj", "q_proj")
            parts = [q.replace("q_proj", p) for p in ("q_proj", "k_proj", "v_proj")]
            assert [v.name for v in value.meta[CONCAT_OF][0]] == parts
            if i % 2:
                del value.meta[CONCAT_OF]
                weights[value.name] = [weights[p] for p in parts]
        quantize_int4(model, accuracy_level=0, embeddings=True, prequantized=weights)
        package.save(tmp_path / "int4", progress=False)
    saved = ir.load(tmp_path / "int4" / "model.onnx")
    nodes = _nbits_nodes(saved)
    assert sum("qkv_proj" in n for n in nodes) == LAYERS
    added = {n.name for n in saved.graph if n.op_type == "Add"}
    assert all(f"{n.name}/add_offsets" in added for k, n in nodes.items() if "qkv_proj" in k)
    tokens, logits = _greedy(_session(tmp_path / "int4"), 16)
    ref_tokens, ref_logits = reference
    np.testing.assert_allclose(logits, ref_logits, rtol=0, atol=1e-3)
    assert tokens == ref_tokens


def _matmul_model(weight: np.ndarray) -> ir.Model:
    """``y = x @ W`` with ``W [K, N]`` an initializer named ``w``."""
    k, n = weight.shape
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, k]))
    w = ir.Value(
        name="w",
        type=ir.TensorType(ir.DataType.FLOAT),
        shape=ir.Shape([k, n]),
        const_value=ir.Tensor(weight, name="w"),
    )
    node = ir.node("MatMul", [x, w])
    node.outputs[0].name = "y"
    graph = ir.Graph([x], node.outputs, nodes=[node], initializers=[w], opset_imports={"": 21})
    return ir.Model(graph, ir_version=10)


@pytest.mark.parametrize(
    "types",
    [("Q4_1", "Q4_1"), ("Q8_0", "Q8_0"), ("Q4_0", "Q4_1"), ("Q4_0", "Q8_0")],
    ids=["q4_1+q4_1", "q8_0+q8_0", "q4_0+q4_1", "q4_0+q8_0"],
)
def test_stacked_gguf_weights_of_mixed_types(tmp_path, types):
    # Rows from two GGUF tensors (packed q/k/v): blocks of one type are stacked into one
    # MatMulNBits; parts of different types become one op each, their outputs
    # concatenated. Nothing is re-rounded either way.
    import gguf

    from mobius.weights import GGUFFile

    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(tmp_path / "w.gguf"), "llama")
    for i, name in enumerate(types):
        qtype = gguf.GGMLQuantizationType[name]
        data = rng.standard_normal((8 * (i + 1), 64)).astype(np.float32)
        writer.add_tensor(f"t{i}", gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with GGUFFile.open(tmp_path / "w.gguf") as file:
        sources = [GGUFWeight(f"t{i}", file.tensors[f"t{i}"]) for i in range(len(types))]
        dense = np.concatenate([s.numpy() for s in sources])  # [N, K]
        model = _matmul_model(np.ascontiguousarray(dense.T))
        quantize_int4(model, accuracy_level=0, prequantized={"w": sources}, rtn=False)
        proto = ir.serde.serialize_model(model)
    nodes = [n for n in model.graph if n.op_type == "MatMulNBits"]
    assert len(nodes) == len(set(types))
    assert [n.attributes.get_int("bits") for n in nodes] == [
        probe(t).bits for t in dict.fromkeys(types)
    ]
    xs = rng.standard_normal((2, 64)).astype(np.float32)
    y = ort.InferenceSession(proto.SerializeToString()).run(None, {"x": xs})[0]
    np.testing.assert_allclose(y, xs @ dense.T, rtol=0, atol=1e-5)
