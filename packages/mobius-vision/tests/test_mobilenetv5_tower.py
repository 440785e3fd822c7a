"""Gemma 3n's MobileNet-V5 tower (``models/_mobilenetv5.py``) against timm's, in float64.

On a tiny model perturbed a second time (``BuiltVL``'s sharpening: larger weights, so
activations reach ~70 inside the MQA stages) the float32 tower differs from timm's by
~1.2e-4, but so does timm's own float32 from its float64 (1.15e-4), and timm in float32
differs from itself by 1.35e-4 when only its memory layout changes (channels-last): that
is float32 summation order, not a different computation. This test holds the computation
itself to timm's: the graph, evaluated in float64 by ONNX's reference evaluator, equals
timm in float64 within 1e-9 (1.9e-13 measured on the case's images), where a wrong GELU, norm eps, scale,
resize or pooling would be off by 1e-4 or more.
"""

from __future__ import annotations

import copy
import re
from contextlib import contextmanager

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import torch
from omni_parity_cases_gemma3n import IMAGE_SIZE, gemma3n_config
from onnx import TensorProto, helper, numpy_helper

from mobius.testing import module_graph, perturb_parameters
from mobius_vision.models._mobilenetv5 import MobileNetV5Config, TimmWrapper

FLOAT64_ATOL = 1e-9
#: mobius names a float scalar constant by its value (``const_0.125_f32``); the float64
#: graph takes that exact value rather than its float32 rounding.
_SCALAR_NAME = re.compile(r"const_(.+)_f32")


@contextmanager
def one_torch_thread():
    """The tiny tower's ops on one thread: 0.1 s, where a pool on busy cores takes 20."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def sharpened_tower():
    """timm's tower of the case (via ``TimmWrapperModel``), perturbed as the parity kit
    does and again as ``BuiltVL`` sharpens, eval."""
    from transformers import AutoModel

    config = gemma3n_config()  # skips without timm
    with one_torch_thread():
        torch.manual_seed(0)
        tower = AutoModel.from_config(config.vision_config)
        perturb_parameters(tower, seed=0)
        perturb_parameters(tower, seed=1, scale=0.2)
    return config, tower.eval()


def _exact_scalar(init: onnx.TensorProto, value: np.ndarray) -> np.ndarray:
    match = _SCALAR_NAME.fullmatch(init.name)
    if match and value.size == 1:
        exact = float(match.group(1))
        if np.float32(exact) == value.astype(np.float32).item():  # the name is its value
            return np.full(value.shape, exact)
    return value


def _tanh_gelu(node: onnx.NodeProto, prefix: str) -> list[onnx.NodeProto]:
    """``Gelu(approximate="tanh")`` spelled out with float64 constants (ONNX's own function
    body, which the reference evaluator runs, holds them as float32; the exact GELU's are
    0.5, 1 and 2, exact in float32)."""
    x, y = node.input[0], node.output[0]

    def const(name, value):
        array = numpy_helper.from_array(np.array(value, np.float64))
        return helper.make_node("Constant", [], [prefix + name], value=array)

    def step(op, a, b, out):
        return helper.make_node(op, [a, b], [out])

    p = prefix
    return [
        const("c", 0.044715),
        const("s", np.sqrt(2 / np.pi)),
        const("half", 0.5),
        const("one", 1.0),
        step("Mul", x, x, p + "x2"),
        step("Mul", p + "x2", x, p + "x3"),
        step("Mul", p + "c", p + "x3", p + "cx3"),
        step("Add", x, p + "cx3", p + "inner"),
        step("Mul", p + "s", p + "inner", p + "arg"),
        helper.make_node("Tanh", [p + "arg"], [p + "tanh"]),
        step("Add", p + "one", p + "tanh", p + "phi"),
        step("Mul", p + "half", x, p + "halfx"),
        step("Mul", p + "halfx", p + "phi", y),
    ]


def _is_tanh(gelu: onnx.NodeProto) -> bool:
    return any(a.name == "approximate" and a.s == b"tanh" for a in gelu.attribute)


def _as_float64(model: onnx.ModelProto) -> onnx.ModelProto:
    """The float32 graph made float64: types, weights, constants, casts and GELUs."""
    graph = model.graph
    for value in [*graph.input, *graph.output, *graph.value_info]:
        if value.type.tensor_type.elem_type == TensorProto.FLOAT:
            value.type.tensor_type.elem_type = TensorProto.DOUBLE
    for init in graph.initializer:
        if init.data_type == TensorProto.FLOAT:
            value = _exact_scalar(init, numpy_helper.to_array(init).astype(np.float64))
            init.CopyFrom(numpy_helper.from_array(value, init.name))
    nodes = []
    for index, node in enumerate(graph.node):
        if node.op_type == "Gelu" and _is_tanh(node):
            nodes += _tanh_gelu(node, f"gelu{index}_")
            continue
        for attribute in node.attribute:
            tensor = attribute.t if attribute.type == onnx.AttributeProto.TENSOR else None
            if tensor is not None and tensor.data_type == TensorProto.FLOAT:
                array = numpy_helper.to_array(tensor).astype(np.float64)
                tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))
            if (
                node.op_type == "Cast"
                and attribute.name == "to"
                and attribute.i == TensorProto.FLOAT
            ):
                attribute.i = TensorProto.DOUBLE
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def test_tower_matches_timm_in_float64(sharpened_tower):
    from onnx.reference import ReferenceEvaluator

    config, tower = sharpened_tower
    pixels = np.random.default_rng(0).uniform(-1, 1, (2, 3, IMAGE_SIZE, IMAGE_SIZE))
    reference = copy.deepcopy(tower).double()  # float32 weights: the same numbers in float64
    with one_torch_thread(), torch.no_grad():
        output = reference(pixel_values=torch.from_numpy(pixels), do_pooling=False)
    expected = output.last_hidden_state.numpy()

    ours = TimmWrapper(MobileNetV5Config.from_hf(config.vision_config))
    graph = module_graph(lambda op, x: ours(op, x), {"pixel_values": pixels})
    weights = tower.state_dict()
    for name, value in graph.graph.initializers.items():
        if value.const_value is None:
            value.const_value = ir.tensor(weights[name].numpy(), name=name)
    model = _as_float64(ir.serde.serialize_model(graph))
    assert {n.op_type for n in model.graph.node} >= {"Conv", "Softmax", "Resize"}
    (got,) = ReferenceEvaluator(model).run(None, {"pixel_values": pixels})

    assert got.dtype == np.float64 and got.shape == expected.shape == (2, 2048, 2, 2)
    assert np.abs(expected[1] - expected[0]).max() > 1e-2, "the features ignore the image"
    np.testing.assert_allclose(got, expected, atol=FLOAT64_ATOL, rtol=0)
