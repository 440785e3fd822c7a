"""Unit tests of ``mobius.weights.apply_weights`` on a tiny Llama graph."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx_ir as ir
import pytest
from safetensors.numpy import save_file

import mobius
from mobius.errors import MobiusError, WeightMismatchError
from mobius.weights import (
    DerivedTensor,
    SafetensorsCheckpoint,
    apply_weights,
    parameters,
    rename_prefixes,
)


def tiny_package(dtype: str = "f32") -> mobius.ModelPackage:
    from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        model_type="llama",
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    )
    return mobius.build_from_module(LlamaForCausalLM(config), dtype=dtype)


@pytest.fixture
def tensors(tiny_llama_arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return tiny_llama_arrays


def as_sources(tensors: dict[str, np.ndarray]) -> dict[str, DerivedTensor]:
    """In-memory weight sources (what ``sanitize`` may hand over)."""
    return {
        name: DerivedTensor(lambda a=a: a, a.shape, ir.DataType.from_numpy(a.dtype))
        for name, a in tensors.items()
    }


def filled(model: ir.Model) -> dict[str, np.ndarray]:
    """The data of every initializer that came from the checkpoint, read (and laid out) now."""
    return {
        name: value.const_value.numpy()
        for name, value in model.graph.initializers.items()
        if isinstance(value.const_value, ir.LazyTensor)
    }


def mismatch(package: mobius.ModelPackage, weights, **kwargs) -> str:
    with pytest.raises(WeightMismatchError) as info:
        apply_weights(package.models.values(), weights, **kwargs)
    assert isinstance(info.value, MobiusError)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_every_parameter_is_filled(tensors: dict[str, np.ndarray]) -> None:
    package = tiny_package()
    assert set(parameters(package.model)) == set(tensors)
    apply_weights(package.model, as_sources(tensors))
    assert parameters(package.model) == {}
    values = filled(package.model)
    assert set(values) == set(tensors)
    np.testing.assert_array_equal(
        values["model.embed_tokens.weight"], tensors["model.embed_tokens.weight"]
    )
    np.testing.assert_array_equal(values["model.norm.weight"], tensors["model.norm.weight"])


def test_all_problems_are_listed_in_one_error(tensors: dict[str, np.ndarray]) -> None:
    package = tiny_package()
    names = set(tensors)
    del tensors["model.norm.weight"]
    del tensors["model.layers.0.input_layernorm.weight"]
    tensors["model.rotary_emb.inv_freq"] = np.zeros(4, np.float32)
    tensors["model.layers.0.self_attn.k_proj.weight"] = np.zeros((32, 16), np.float32)  # not .T
    tensors["lm_head.weight"] = np.zeros((64, 32), np.int32)
    message = mismatch(package, as_sources(tensors))
    assert message.startswith("checkpoint does not match the graph: ")
    assert "missing (2): model.layers.0.input_layernorm.weight, model.norm.weight" in message
    assert "unexpected (1): model.rotary_emb.inv_freq" in message
    assert (
        "wrong shape (1): model.layers.0.self_attn.k_proj.weight [32, 16] (expected [16, 32])"
        in message
    )
    assert "wrong dtype (1): lm_head.weight INT32 (expected FLOAT)" in message
    # Nothing was filled: the graph is left as it was.
    assert set(parameters(package.model)) == names


def test_long_listings_are_cut(tensors: dict[str, np.ndarray]) -> None:
    package = tiny_package()
    tensors.update({f"extra.{i:02d}": np.zeros(1, np.float32) for i in range(20)})
    message = mismatch(package, as_sources(tensors))
    assert "unexpected (20): extra.00, extra.01" in message
    assert "extra.11 (+8 more)" in message
    assert "extra.12" not in message


def test_linear_weight_is_transposed_on_write(tensors: dict[str, np.ndarray]) -> None:
    package = tiny_package()
    apply_weights(package.model, as_sources(tensors))
    values = filled(package.model)
    for name in (
        "model.layers.0.self_attn.q_proj.weight",  # square
        "model.layers.0.self_attn.k_proj.weight",  # [16, 32] -> [32, 16]
        "model.layers.0.mlp.down_proj.weight",  # [32, 64] -> [64, 32]
        "lm_head.weight",
    ):
        np.testing.assert_array_equal(values[name], tensors[name].T, err_msg=name)
        assert values[name].flags.c_contiguous
        assert list(package.model.graph.initializers[name].shape) == list(tensors[name].T.shape)
    # Norms and the embedding are kept as they are.
    np.testing.assert_array_equal(
        values["model.embed_tokens.weight"], tensors["model.embed_tokens.weight"]
    )


def test_float32_checkpoint_is_cast_to_an_f16_build(
    tmp_path: Path, tensors: dict[str, np.ndarray]
) -> None:
    package = tiny_package("f16")
    save_file(tensors, tmp_path / "model.safetensors")
    with SafetensorsCheckpoint.open(tmp_path) as checkpoint:
        apply_weights(package.model, checkpoint)
        values = filled(package.model)
    for name, array in tensors.items():
        initializer = package.model.graph.initializers[name]
        assert initializer.dtype == ir.DataType.FLOAT16
        assert initializer.const_value.dtype == ir.DataType.FLOAT16
        expected = array.T if name.endswith("proj.weight") or name == "lm_head.weight" else array
        assert values[name].dtype == np.float16
        np.testing.assert_array_equal(values[name], expected.astype(np.float16), err_msg=name)


def test_bfloat16_checkpoint_is_cast_to_an_f32_build(tensors: dict[str, np.ndarray]) -> None:
    package = tiny_package("f32")
    tensors = {k: v.astype(ml_dtypes.bfloat16) for k, v in tensors.items()}
    apply_weights(package.model, as_sources(tensors))
    values = filled(package.model)
    assert values["model.norm.weight"].dtype == np.float32
    np.testing.assert_array_equal(
        values["model.norm.weight"], tensors["model.norm.weight"].astype(np.float32)
    )
    np.testing.assert_array_equal(
        values["lm_head.weight"], tensors["lm_head.weight"].astype(np.float32).T
    )


def test_weights_are_read_only_when_written(tensors: dict[str, np.ndarray]) -> None:
    package = tiny_package()
    reads: list[str] = []
    sources = {
        name: DerivedTensor(
            lambda name=name, a=a: reads.append(name) or a, a.shape, ir.DataType.FLOAT
        )
        for name, a in tensors.items()
    }
    apply_weights(package.model, sources)
    assert reads == []  # shapes and dtypes are checked without reading data
    package.model.graph.initializers["model.norm.weight"].const_value.numpy()
    assert reads == ["model.norm.weight"]


def test_ignore_globs_suppress_unexpected(tensors: dict[str, np.ndarray]) -> None:
    package = tiny_package()
    tensors["model.rotary_emb.inv_freq"] = np.zeros(4, np.float32)
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.zeros(4, np.float32)
    tensors["extra.bias"] = np.zeros(4, np.float32)

    message = mismatch(package, as_sources(tensors), ignore=["*rotary_emb.inv_freq"])
    assert "unexpected (1): extra.bias" in message
    assert "inv_freq" not in message

    apply_weights(package.model, as_sources(tensors), ignore=["*rotary_emb.inv_freq", "extra.*"])
    assert parameters(package.model) == {}


def test_ignore_does_not_excuse_a_missing_parameter(tensors: dict[str, np.ndarray]) -> None:
    package = tiny_package()
    del tensors["model.norm.weight"]
    message = mismatch(package, as_sources(tensors), ignore=["model.norm.*"])
    assert "missing (1): model.norm.weight" in message


def test_unread_parameters_are_not_unexpected(tensors: dict[str, np.ndarray]) -> None:
    """A parameter a graph pass removed (no node read it) keeps its checkpoint tensor known,
    by exact name only."""
    package = tiny_package()
    package.model.graph.initializers.pop("model.norm.weight")
    message = mismatch(package, as_sources(tensors))
    assert "unexpected (1): model.norm.weight" in message
    message = mismatch(package, as_sources(tensors), unread=["model.norm.*"])
    assert "unexpected (1): model.norm.weight" in message  # not a glob

    apply_weights(package.model, as_sources(tensors), unread=["model.norm.weight"])
    assert parameters(package.model) == {}


def test_several_models_are_filled_together(tensors: dict[str, np.ndarray]) -> None:
    """Weights are matched against the parameters of all graphs (one per component)."""
    first, second = tiny_package(), tiny_package()
    renamed = {f"second.{k}": v for k, v in tensors.items()}
    for name in list(second.model.graph.initializers):
        value = second.model.graph.initializers[name]
        if value.const_value is None:
            second.model.graph.initializers.pop(name)
            value.name = f"second.{name}"
            second.model.graph.initializers.add(value)
    apply_weights([first.model, second.model], as_sources({**tensors, **renamed}))
    assert parameters(first.model) == {} and parameters(second.model) == {}

    third = tiny_package()
    message = mismatch(third, as_sources({**tensors, **renamed}))
    assert "unexpected (21)" in message  # only one graph given: the other's weights are extra


def test_rename_prefixes_takes_the_first_matching_prefix() -> None:
    renames = {"model.visual.": "vision.", "model.": "text.model.", "lm_head.": "text.lm_head."}
    weights = {"model.visual.a": 1, "model.b": 2, "lm_head.weight": 3, "other.c": 4}
    assert rename_prefixes(weights, renames) == {
        "vision.a": 1,
        "text.model.b": 2,
        "text.lm_head.weight": 3,
        "other.c": 4,
    }
