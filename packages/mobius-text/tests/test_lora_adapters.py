"""``mobius build --adapter``: PEFT LoRA adapters merged, or kept as LoRA inputs for multi-LoRA.

A tiny Llama (every parameter perturbed) and two PEFT adapters on it with different
targets and ranks (``rank_pattern``, ``alpha_pattern`` too), ``lora_B`` perturbed (peft
starts it at zero). The reference is peft in PyTorch with the adapter active, or
disabled for the base model:

- merged (``--adapter``): logits on prefill and decode through the KV cache;
- unmerged (``--adapter-inputs``): the same graph with each ``.onnx_adapter`` file fed
  by ONNX Runtime (``RunOptions.add_active_adapter``), and with none fed (the base);
- onnxruntime-genai's ``Adapters`` API switching between the two adapters and none:
  greedy tokens equal peft's per adapter and the base model's without one.

Bad uses are one-line errors. Needs torch and peft (test dependencies).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import onnxruntime as ort
import pytest

from mobius.cli import main
from mobius.testing import OnnxCausalLM, build_with_cli, make_random_model, torch_greedy
from mobius.testing._parity import compare_causal_lm

torch = pytest.importorskip("torch")
pytest.importorskip("peft", reason="peft is the reference (a test dependency)")

ADAPTERS = {
    "alpha": dict(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
        rank_pattern={"v_proj": 2}, alpha_pattern={"layers.1.mlp.down_proj": 3},
    ),
    "beta": dict(r=2, lora_alpha=4, target_modules=["k_proj", "o_proj", "q_proj", "up_proj"]),
}  # fmt: skip
PROMPT = [1, 17, 42, 9, 5, 63, 8, 60]
NEW_TOKENS = 10


@pytest.fixture(scope="module")
def peft_llama(tmp_path_factory):
    """``(directory, peft model)``: ``hf/`` the base, ``alpha/`` and ``beta/`` the adapters."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig

    directory = tmp_path_factory.mktemp("lora")
    config = LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, initializer_range=0.2,
    )  # fmt: skip
    model = make_random_model(config, seed=0)
    model.save_pretrained(directory / "hf")
    peft_model = None
    for name, lora in ADAPTERS.items():
        lora_config = LoraConfig(lora_dropout=0.0, **lora)
        if peft_model is None:
            peft_model = get_peft_model(model, lora_config, adapter_name=name)
        else:
            peft_model.add_adapter(name, lora_config)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, tensor in sorted(peft_model.named_parameters()):
            if ".lora_" in name:
                tensor.copy_(torch.randn(tensor.shape, generator=generator) * 0.3)
    peft_model.save_pretrained(directory / "saved")  # a named adapter goes to saved/<name>
    for name in ADAPTERS:
        (directory / "saved" / name).rename(directory / name)
    return directory, peft_model.eval()


def adapter_active(peft_model, name):
    """The adapted LlamaForCausalLM with adapter ``name`` on (None: all off), as a context."""
    if name is None:
        return peft_model.disable_adapter()
    peft_model.set_adapter(name)
    return torch.no_grad()


@pytest.fixture(scope="module")
def unmerged(peft_llama):
    directory, _ = peft_llama
    adapters = f"{directory / 'alpha'},{directory / 'beta'}"
    return build_with_cli(
        directory / "hf", directory / "unmerged", "--adapter", adapters, "--adapter-inputs"
    )


class AdapterSession:
    """An ONNX Runtime session that runs with one ``.onnx_adapter`` file active."""

    def __init__(self, session, path) -> None:
        self.session, self.options = session, ort.RunOptions()
        self.adapter = ort.LoraAdapter()
        self.adapter.Load(str(path))
        self.options.add_active_adapter(self.adapter)

    def run(self, names, feeds):
        return self.session.run(names, feeds, self.options)


def check_parity(peft_model, name, onnx_model):
    with adapter_active(peft_model, name):
        result = compare_causal_lm(peft_model.base_model.model, onnx_model, [7, 4], decode_steps=4)
    result.assert_close()
    print(f"adapter {name}: max abs logit diff {result.max_diff:.3g}")
    return result.max_diff


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_merged_equals_peft(peft_llama, tmp_path, name):
    directory, peft_model = peft_llama
    out = build_with_cli(directory / "hf", tmp_path / "out", "--adapter", str(directory / name))
    assert check_parity(peft_model, name, OnnxCausalLM(out / "model.onnx")) < 1e-5
    record = json.loads((out / "merged_adapter.json").read_text())
    assert record["merged"] is True and record["r"] == ADAPTERS[name]["r"]


@pytest.mark.parametrize("name", [None, *sorted(ADAPTERS)])
def test_unmerged_equals_peft(peft_llama, unmerged, name):
    _, peft_model = peft_llama
    onnx_model = OnnxCausalLM(unmerged / "model.onnx")
    if name is not None:
        onnx_model.session = AdapterSession(onnx_model.session, unmerged / f"{name}.onnx_adapter")
    assert check_parity(peft_model, name, onnx_model) < 1e-5


def test_unmerged_fused_cpu_equals_peft(peft_llama, tmp_path):
    """``--ep cpu``'s passes leave the LoRA inputs alone (they packed the zero-rank
    defaults of q, k and v as if they were weights)."""
    directory, peft_model = peft_llama
    out = build_with_cli(
        directory / "hf", tmp_path / "out", "--ep", "cpu", "--adapter-inputs",
        "--adapter", f"{directory / 'alpha'},{directory / 'beta'}",
    )  # fmt: skip
    onnx_model = OnnxCausalLM(out / "model.onnx")
    onnx_model.session = AdapterSession(onnx_model.session, out / "beta.onnx_adapter")
    assert check_parity(peft_model, "beta", onnx_model) < 1e-5


def test_unmerged_graph_inputs(unmerged):
    import onnx

    # Inputs with a default: ONNX Runtime lists them as overridable initializers.
    session = ort.InferenceSession(str(unmerged / "model.onnx"))
    lora = {i.name: i.shape for i in session.get_overridable_initializers()}
    q = "model.layers.0.self_attn.q_proj"
    assert lora[f"{q}.lora_A.MatMul.weight"] == [32, f"{q}.lora_rank"]
    assert lora[f"{q}.lora_B.MatMul.weight"] == [f"{q}.lora_rank", 32]
    graph = onnx.load(unmerged / "model.onnx", load_external_data=False).graph
    defaults = {t.name: list(t.dims) for t in graph.initializer if t.name in lora}
    assert defaults[f"{q}.lora_A.MatMul.weight"] == [32, 0]  # zero rank: the base model
    assert defaults[f"{q}.lora_B.MatMul.weight"] == [0, 32]
    # every projection some adapter adapts, in both layers: q k v o, up down
    assert len(lora) == 2 * 2 * 6
    genai = json.loads((unmerged / "genai_config.json").read_text())
    assert not any(".lora_" in name for name in genai["model"]["decoder"]["inputs"].values())


@pytest.mark.skipif(sys.version_info < (3, 11), reason="onnxruntime-genai needs Python >= 3.11")
def test_genai_adapters_switch(peft_llama, unmerged):
    og = pytest.importorskip("onnxruntime_genai")
    _, peft_model = peft_llama
    model = og.Model(og.Config(str(unmerged)))
    adapters = og.Adapters(model)
    for name in ADAPTERS:
        adapters.load(str(unmerged / f"{name}.onnx_adapter"), name)
    seen = set()
    for name in ["alpha", None, "beta", "alpha"]:
        with adapter_active(peft_model, name):
            expected = torch_greedy(peft_model.base_model.model, PROMPT, NEW_TOKENS, eos="suppress")
        params = og.GeneratorParams(model)
        total = len(PROMPT) + NEW_TOKENS
        params.set_search_options(do_sample=False, max_length=total, min_length=total)
        generator = og.Generator(model, params)
        if name is not None:
            generator.set_active_adapter(adapters, name)
        generator.append_tokens(np.array([PROMPT], dtype=np.int32))
        while not generator.is_done():
            generator.generate_next_token()
        assert [int(t) for t in generator.get_sequence(0)][len(PROMPT) :] == expected, name
        seen.add(tuple(expected))
    assert len(seen) == 3  # the adapters change the tokens: the test can tell them apart


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--adapter-inputs"], "--adapter-inputs needs the adapters"),
        (["--adapter", "{d}/missing"], "missing is not a directory"),
        (["--adapter", "{d}/alpha", "--no-weights"], "--adapter needs the weights"),
        (["--adapter", "{d}/alpha", "--adapter-inputs", "--quant", "int4"], "merged adapters only"),
        (["--adapter", "{d}/alpha,{d}/alpha"], "two adapters are named 'alpha'"),
        (["--adapter", "{d}/wrong"], "adapts model.layers.0.self_attn.nope.weight, which"),
        (["--adapter", "{d}/wrong", "--adapter-inputs"], "model.layers.0.self_attn.nope is not"),
        (["--adapter", "{d}/badconfig"], "lora_alpha is 'x': not a positive number"),
        (["--adapter", "{d}/alpha", "--validate"], "lacks the merged --adapter"),
    ],
)
def test_bad_use_is_one_line(peft_llama, tmp_path, capsys, extra, message):
    directory, _ = peft_llama
    if not (directory / "wrong").exists():
        make_broken(directory)
    extra = [e.format(d=directory) for e in extra]
    code = main(["build", "--model", str(directory / "hf"), str(tmp_path / "out"), *extra])
    err = capsys.readouterr().err.strip()
    assert code != 0 and message in err and "\n" not in err, err
    assert not (tmp_path / "out").exists()


def make_broken(directory):
    """``wrong/``: an adapter of a module the model lacks; ``badconfig/``: lora_alpha 'x'."""
    import shutil

    from safetensors.numpy import load_file, save_file

    for name in ("wrong", "badconfig"):
        shutil.copytree(directory / "alpha", directory / name)
    tensors = load_file(directory / "wrong" / "adapter_model.safetensors")
    renamed = {
        k.replace("layers.0.self_attn.q_proj", "layers.0.self_attn.nope"): v
        for k, v in tensors.items()
    }
    save_file(renamed, directory / "wrong" / "adapter_model.safetensors")
    config = json.loads((directory / "wrong" / "adapter_config.json").read_text())
    config["target_modules"] = [*config["target_modules"], "nope"]
    (directory / "wrong" / "adapter_config.json").write_text(json.dumps(config))
    config = json.loads((directory / "badconfig" / "adapter_config.json").read_text())
    config["lora_alpha"] = "x"
    (directory / "badconfig" / "adapter_config.json").write_text(json.dumps(config))
