"""mobius.lora: a PEFT LoRA adapter merged as peft's ``merge_and_unload`` merges it, strictly.

The reference is peft itself on tiny random models (a Llama, and a GPT-2 whose Conv1D
layers store ``[in, out]``: ``fan_in_fan_out``), every parameter perturbed, ``lora_B``
too (peft starts it at zero); the adapter has per-module ranks and alphas
(``rank_pattern``, ``alpha_pattern``). Bad configs and tensors are one-line errors that
name what is wrong. Needs torch and peft (test dependencies).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from mobius.errors import WeightMismatchError
from mobius.lora import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    LoraAdapter,
    LoraAdapterError,
    merge_lora,
)
from mobius.testing import perturb_parameters
from mobius.weights import SafetensorsCheckpoint

torch = pytest.importorskip("torch")
pytest.importorskip("peft", reason="peft is the reference merge (a test dependency)")

PREFIX = "base_model.model.model.layers.0."


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(
        GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=32)
    )


def adapted(directory, make_model, **lora):
    """``make_model()`` perturbed and saved to ``directory/base``, its random adapter to
    ``directory/adapter``; returns peft's merged state dict as numpy arrays."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model = make_model().float().eval()
    perturb_parameters(model, seed=0)
    model.save_pretrained(directory / "base")
    peft_model = get_peft_model(model, LoraConfig(lora_dropout=0.0, **lora))
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, tensor in sorted(peft_model.named_parameters()):
            if ".lora_" in name:
                tensor.add_(torch.randn(tensor.shape, generator=generator) * 0.1)
    peft_model.save_pretrained(directory / "adapter")
    merged = peft_model.merge_and_unload().state_dict()
    return {name: tensor.detach().numpy() for name, tensor in merged.items()}


LLAMA_LORA = dict(
    r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
    rank_pattern={"v_proj": 2}, alpha_pattern={"layers.1.mlp.down_proj": 3},
)  # fmt: skip


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """``(directory with base/ and adapter/, peft's merged weights)``."""
    root = tmp_path_factory.mktemp("lora_llama")
    return root, adapted(root, tiny_llama, **LLAMA_LORA)


@pytest.mark.parametrize(
    "make_model, lora",
    [
        (tiny_llama, dict(LLAMA_LORA, use_rslora=True)),
        (tiny_gpt2, dict(r=2, lora_alpha=4, target_modules=["c_attn"], fan_in_fan_out=True)),
    ],
    ids=["llama-rslora", "gpt2-fan-in-fan-out"],
)
def test_merge_equals_peft(tmp_path, make_model, lora):
    expected = adapted(tmp_path, make_model, **lora)
    check_merge(tmp_path, expected)


def test_merge_equals_peft_with_patterns(llama):
    check_merge(*llama)


def check_merge(directory, expected):
    checkpoint = SafetensorsCheckpoint.open(directory / "base")
    merged = merge_lora(checkpoint, LoraAdapter.read(directory / "adapter"))
    assert merged.keys() == checkpoint.keys()
    changed = [name for name in merged if merged[name] is not checkpoint[name]]
    assert changed
    for name in changed:
        got = merged[name].numpy()
        assert got.dtype == checkpoint[name].numpy().dtype
        np.testing.assert_allclose(got, expected[name], rtol=0, atol=1e-6, err_msg=name)
        assert np.abs(got - checkpoint[name].numpy()).max() > 1e-3  # the adapter did something
    for name in set(merged) - set(changed):
        np.testing.assert_array_equal(checkpoint[name].numpy(), expected[name])


def broken_adapter(llama, tmp_path, config=None, tensors=None):
    """A copy of the Llama's adapter with config fields and tensors replaced."""
    from safetensors.numpy import load_file, save_file

    adapter = shutil.copytree(llama[0] / "adapter", tmp_path / "adapter")
    raw = json.loads((adapter / ADAPTER_CONFIG).read_text())
    (adapter / ADAPTER_CONFIG).write_text(json.dumps({**raw, **(config or {})}))
    weights = {**load_file(adapter / ADAPTER_WEIGHTS), **(tensors or {})}
    save_file({k: v for k, v in weights.items() if v is not None}, adapter / ADAPTER_WEIGHTS)
    return adapter


def one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "change, message",
    [
        ({"r": 0}, "r is 0: not a positive int"),
        ({"r": True}, "r is True"),
        ({"r": "4"}, "r is '4'"),
        ({"lora_alpha": float("nan")}, "lora_alpha is nan"),
        ({"lora_alpha": -1}, "lora_alpha is -1"),
        ({"use_rslora": "yes"}, "use_rslora is 'yes': not true or false"),
        ({"fan_in_fan_out": 1}, "fan_in_fan_out is 1"),
        ({"use_dora": True}, "use_dora is True: DoRA"),
        ({"bias": "all"}, "bias is 'all'"),
        ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
        ({"peft_type": "IA3"}, "peft_type is 'IA3'"),
        ({"init_lora_weights": "pissa_niter_4"}, "init_lora_weights"),
        ({"target_modules": 5}, "target_modules is 5"),
        ({"target_modules": "(q_proj"}, "not a regex"),
        ({"target_modules": ["k_proj"]}, "is not one target_modules names"),
        ({"rank_pattern": {"v_proj": 0}}, "rank_pattern['v_proj'] is 0"),
        ({"rank_pattern": {"v_proj": 3}}, "v_proj.lora_A.weight has shape [2, 16]"),
        ({"alpha_pattern": []}, "alpha_pattern is []"),
    ],
)
def test_bad_adapter_config_is_one_line(llama, tmp_path, change, message):
    with pytest.raises(LoraAdapterError) as excinfo:
        LoraAdapter.read(broken_adapter(llama, tmp_path, config=change))
    assert message in one_line(excinfo)


@pytest.mark.parametrize(
    "tensors, message",
    [
        ({"base_model.model.lm_head.weight": np.zeros((64, 16), np.float32)},
         "base_model.model.lm_head.weight is not a base_model.model.*.lora_A.weight"),
        ({PREFIX + "self_attn.q_proj.lora_B.weight": None},
         "q_proj.lora_A.weight has no base_model.model.model.layers.0.self_attn.q_proj.lora_B"),
        ({PREFIX + "self_attn.q_proj.lora_A.weight": np.zeros((3, 16), np.float32)},
         "q_proj.lora_A.weight has shape [3, 16]: not a linear layer's of rank 4"),
    ],
)  # fmt: skip
def test_bad_adapter_tensor_is_one_line(llama, tmp_path, tensors, message):
    with pytest.raises(LoraAdapterError) as excinfo:
        LoraAdapter.read(broken_adapter(llama, tmp_path, tensors=tensors))
    assert message in one_line(excinfo)


def test_unused_adapter_tensor_fails_the_merge(llama, tmp_path):
    """A module the checkpoint does not hold: the build would fail naming the tensor."""
    a, b = np.zeros((4, 16), np.float32), np.zeros((16, 4), np.float32)
    extra = "base_model.model.model.layers.7.self_attn.q_proj"
    tensors = {f"{extra}.lora_A.weight": a, f"{extra}.lora_B.weight": b}
    adapter = LoraAdapter.read(broken_adapter(llama, tmp_path, tensors=tensors))
    with pytest.raises(WeightMismatchError) as excinfo:
        merge_lora(SafetensorsCheckpoint.open(llama[0] / "base"), adapter)
    assert f"{extra}.lora_A.weight adapts model.layers.7.self_attn.q_proj.weight" in one_line(
        excinfo
    )


def test_shape_mismatch_fails_the_merge(llama, tmp_path):
    tensors = {PREFIX + "self_attn.q_proj.lora_B.weight": np.zeros((24, 4), np.float32)}
    adapter = LoraAdapter.read(broken_adapter(llama, tmp_path, tensors=tensors))
    with pytest.raises(WeightMismatchError) as excinfo:
        merge_lora(SafetensorsCheckpoint.open(llama[0] / "base"), adapter)
    assert (
        f"{PREFIX}self_attn.q_proj.lora_A.weight and its lora_B make [24, 16], but the weight "
        "model.layers.0.self_attn.q_proj.weight is [16, 16]"
    ) in one_line(excinfo)


def test_renames_match_both_sides(llama):
    """``renames`` bring the adapter's and the checkpoint's names to one naming; an adapter
    trained on a submodule gets its prefix from ``adapter_renames``."""
    directory, expected = llama
    checkpoint = {
        f"wrapper.{k}": v for k, v in SafetensorsCheckpoint.open(directory / "base").items()
    }
    adapter = LoraAdapter.read(directory / "adapter")
    with pytest.raises(WeightMismatchError):
        merge_lora(checkpoint, adapter)
    merged = merge_lora(checkpoint, adapter, adapter_renames={"model.": "wrapper.model."})
    also = merge_lora(checkpoint, adapter, renames={"wrapper.": ""})
    name = "model.layers.1.mlp.down_proj.weight"
    np.testing.assert_allclose(merged[f"wrapper.{name}"].numpy(), expected[name], atol=1e-6)
    np.testing.assert_array_equal(
        merged[f"wrapper.{name}"].numpy(), also[f"wrapper.{name}"].numpy()
    )
