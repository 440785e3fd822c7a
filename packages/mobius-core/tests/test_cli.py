"""The ``mobius`` command line on a tiny Llama checkpoint written by hand."""

from __future__ import annotations

import json
import os
import re
import stat
import struct
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest

import mobius
from mobius.cli import main

TEXT_KEYS = ["llama", "mistral", "qwen2", "qwen3", "smollm3"]
NUM_LAYERS, KV_HEADS, HEAD_DIM, VOCAB = 2, 2, 8, 64
LINEAR = ("_proj.weight", "lm_head.weight")  # stored [in, out]: the checkpoint's transpose


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``mobius ARGV`` in process: (exit code, stdout, stderr); argparse exits are caught."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def build(capsys, model: Path, out: Path, *options: str) -> None:
    code, stdout, stderr = run_cli(capsys, "build", "--model", str(model), str(out), "-q", *options)
    assert code == 0, stderr
    assert stderr == ""
    assert re.fullmatch(rf"wrote {re.escape(str(out))} \([0-9.]+ (MiB|GiB)\)", stdout.strip())


def load_graph(out: Path) -> onnx.ModelProto:
    return onnx.load(str(out / "model.onnx"), load_external_data=False)


def weight_initializers(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    """The initializers that hold checkpoint weights (not small int64 constants)."""
    return {t.name: t for t in model.graph.initializer if t.name.endswith(".weight")}


def input_types(model: onnx.ModelProto) -> dict[str, int]:
    return {i.name: i.type.tensor_type.elem_type for i in model.graph.input}


def feeds(steps: int, past: int, cache_dtype, cache=None) -> dict[str, np.ndarray]:
    ids = np.arange(1, steps + 1, dtype=np.int64)[None] + past
    result = {
        "input_ids": ids % VOCAB,
        "attention_mask": np.ones((1, past + steps), np.int64),
        "position_ids": np.arange(past, past + steps, dtype=np.int64)[None],
    }
    for i in range(NUM_LAYERS):
        for kind in ("key", "value"):
            name = f"past_key_values.{i}.{kind}"
            if cache is None:
                result[name] = np.zeros((1, KV_HEADS, 0, HEAD_DIM), cache_dtype)
            else:
                result[name] = cache[f"present.{i}.{kind}"]
    return result


def prefill_and_step(path: Path, cache_dtype) -> tuple[np.ndarray, np.ndarray]:
    """Logits of a 3-token prefill and of one decode step fed the prefill's cache."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    first = dict(zip(names, session.run(None, feeds(3, 0, cache_dtype)), strict=True))
    second = dict(zip(names, session.run(None, feeds(1, 3, cache_dtype, cache=first)), strict=True))
    assert second["present.0.key"].shape == (1, KV_HEADS, 4, HEAD_DIM)
    return first["logits"], second["logits"]


# -- help, version, list ------------------------------------------------------------------


def test_help(capsys) -> None:
    code, out, err = run_cli(capsys, "--help")
    assert code == 0
    assert out.startswith("usage: mobius")
    for text in ("build", "list", "--version", "examples:"):
        assert text in out


def test_build_help_explains_dtype_and_no_weights(capsys) -> None:
    code, out, _ = run_cli(capsys, "build", "--help")
    assert code == 0
    flat = " ".join(out.split())
    assert "usage: mobius build" in out
    assert "--model ID_OR_DIR" in flat
    assert "OUTPUT_DIR" in flat
    assert "--dtype {f32,f16,bf16}" in flat
    assert "default: the checkpoint's own" in flat
    assert "--no-weights" in flat
    assert "parameters become graph inputs" in flat


def test_no_command_is_a_usage_error(capsys) -> None:
    code, out, err = run_cli(capsys)
    assert code == 2
    assert "usage: mobius" in err


def test_unknown_dtype_is_a_usage_error(capsys, tiny_llama_dir: Path, tmp_path: Path) -> None:
    code, _, err = run_cli(
        capsys, "build", "--model", str(tiny_llama_dir), str(tmp_path / "o"), "--dtype", "f8"
    )
    assert code == 2
    assert "invalid choice: 'f8'" in err
    assert not (tmp_path / "o").exists()


def test_list(capsys) -> None:
    code, out, err = run_cli(capsys, "list")
    assert code == 0
    assert err == ""
    lines = out.splitlines()
    headers = [i for i, line in enumerate(lines) if line.startswith("mobius-text (")]
    assert len(headers) == 1, out
    start = headers[0]
    listed = {}
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        key, task = line.split()
        listed[key] = task
    assert lines[start] == f"mobius-text ({len(listed)})"
    assert list(listed) == sorted(listed)
    for key in TEXT_KEYS:
        assert listed.get(key) == "causal-lm", key
    # One task column for every package, however long the longest key.
    rows = [line for line in lines if line.startswith("  ")]
    columns = {len(line) - len(line.split()[-1]) for line in rows}
    assert len(columns) == 1, columns


def test_python_m_mobius_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mobius", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"mobius {mobius.__version__}"


def test_console_build_never_imports_torch(tiny_llama_dir: Path, tmp_path: Path) -> None:
    """The command hides an installed torch from transformers' configs (mobius needs none)."""
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "mobius", "build", "--model"]
        + [str(tiny_llama_dir), str(out), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (out / "model.onnx").is_file()
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()}
    assert "transformers" in imported  # the config classes did load
    assert not {name for name in imported if name.split(".")[0] == "torch"}
    assert "PyTorch was not found" not in result.stderr


@pytest.mark.parametrize(
    "args, hidden",
    [
        (["build", "--model", "m", "out"], True),
        (["build", "--model", "m", "out", "--validate"], False),
    ],
)
def test_console_keeps_torch_for_validate(monkeypatch, args, hidden) -> None:
    """--validate runs the source model in torch: the command hides torch only without it."""
    import mobius.cli as cli

    calls = []
    monkeypatch.setattr(cli, "hide_torch_from_transformers", lambda: calls.append(True))
    monkeypatch.setattr(cli, "main", lambda: 0)
    monkeypatch.setattr(sys, "argv", ["mobius", *args])
    with pytest.raises(SystemExit):
        cli.run()
    assert bool(calls) is hidden


# -- build ----------------------------------------------------------------------------------


def test_build_writes_model_data_and_config(capsys, tiny_llama_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    build(capsys, tiny_llama_dir, out)
    # The default --runtime auto adds genai_config.json: a llama runs in onnxruntime-genai;
    # mobius.json is the build record (test_record.py).
    names = ["config.json", "genai_config.json", "mobius.json", "model.onnx", "model.onnx.data"]
    assert sorted(p.name for p in out.iterdir()) == names
    assert (out / "config.json").read_bytes() == (tiny_llama_dir / "config.json").read_bytes()
    onnx.checker.check_model(str(out / "model.onnx"))

    model = load_graph(out)
    weights = weight_initializers(model)
    assert len(weights) == 21
    assert {t.data_type for t in weights.values()} == {onnx.TensorProto.FLOAT}  # checkpoint's
    matrices = [t for t in weights.values() if len(t.dims) == 2]  # tiny norms may stay inline
    assert len(matrices) == 2 + 7 * NUM_LAYERS
    for tensor in matrices:
        assert tensor.data_location == onnx.TensorProto.EXTERNAL, tensor.name
        assert {e.key: e.value for e in tensor.external_data}["location"] == "model.onnx.data"
    assert (out / "model.onnx.data").stat().st_size >= 4 * sum(
        int(np.prod(t.dims)) for t in matrices
    )
    names = [i.name for i in model.graph.input]
    assert names[:3] == ["input_ids", "attention_mask", "position_ids"]
    assert [o.name for o in model.graph.output][:3] == [
        "logits",
        "present.0.key",
        "present.0.value",
    ]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


@pytest.mark.parametrize("spelling", ["fp16", "float16", "half", "F16"])
def test_dtype_spellings_users_type(capsys, tiny_llama_dir: Path, tmp_path: Path, spelling):
    out = tmp_path / "out"
    build(capsys, tiny_llama_dir, out, "--dtype", spelling, "--no-weights")
    assert mobius.BuildOptions.of(dtype=spelling).dtype == "f16"
    graph = load_graph(out)
    assert graph.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16


def test_a_large_float_build_suggests_quantizing(
    capsys, tiny_llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mobius.cli

    monkeypatch.setattr(mobius.cli, "QUANT_HINT_BYTES", 0)  # every build counts as large
    assert main(["build", "--model", str(tiny_llama_dir), str(tmp_path / "f"), "-q"]) == 0
    assert "--quant int4 stores MatMul weights in 4-bit" in capsys.readouterr().err
    argv = ["build", "--model", str(tiny_llama_dir), str(tmp_path / "q"), "-q", "--quant", "int4"]
    assert main(argv) == 0
    assert "--quant int4 stores" not in capsys.readouterr().err


def test_cuda_with_float32_warns(capsys, tiny_llama_dir: Path, tmp_path: Path) -> None:
    argv = ["build", "--model", str(tiny_llama_dir), str(tmp_path / "out"), "-q", "--ep", "cuda"]
    assert main([*argv, "--dtype", "f32", "--no-weights"]) == 0
    assert "mobius: note: --ep cuda with float32 weights" in capsys.readouterr().err
    assert main([*argv[:3], str(tmp_path / "f16"), *argv[4:], "--dtype", "f16"]) == 0
    assert "--ep cuda with float32" not in capsys.readouterr().err


def test_piped_build_prints_plain_lines_not_bars(capsys, tiny_llama_dir: Path, tmp_path) -> None:
    # stderr is not a terminal here (captured): no tqdm bar, one line per graph written.
    assert main(["build", "--model", str(tiny_llama_dir), str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert "mobius: wrote model.onnx (" in err
    assert "tensor/s" not in err and "\r" not in err
    assert main(["build", "--model", str(tiny_llama_dir), str(tmp_path / "q"), "-q"]) == 0
    assert "wrote model.onnx" not in capsys.readouterr().err


def test_build_weights_round_trip(capsys, make_tiny_llama, tiny_llama_arrays, tmp_path) -> None:
    source = make_tiny_llama(tensors=tiny_llama_arrays)
    out = tmp_path / "out"
    build(capsys, source, out)
    model = onnx.load(str(out / "model.onnx"))  # with the external data
    stored = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    for name, array in tiny_llama_arrays.items():
        expected = array.T if name.endswith(LINEAR) else array
        np.testing.assert_array_equal(stored[name], expected, err_msg=name)


def test_output_directory_permissions_follow_the_umask(
    capsys, tiny_llama_dir: Path, tmp_path: Path
) -> None:
    """The output is a normal directory: ``mkdtemp``'s private 0o700 must not leak into it.

    A plain ``mkdir`` under umask 022 gives 0o755; other users (a server, a
    container running as another uid) must be able to read the built model.
    """
    out = tmp_path / "out"
    old = os.umask(0o022)
    try:
        build(capsys, tiny_llama_dir, out)
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert stat.S_IMODE((out / "model.onnx").stat().st_mode) == 0o644


def test_f16_build_has_float16_weights_and_cache_and_runs(
    capsys, tiny_llama_dir: Path, tmp_path: Path
) -> None:
    out16, out32 = tmp_path / "f16", tmp_path / "f32"
    build(capsys, tiny_llama_dir, out16, "--dtype", "f16")
    build(capsys, tiny_llama_dir, out32)

    model = load_graph(out16)
    weights = weight_initializers(model)
    assert len(weights) == 21
    assert {t.data_type for t in weights.values()} == {onnx.TensorProto.FLOAT16}
    types = input_types(model)
    for i in range(NUM_LAYERS):
        assert types[f"past_key_values.{i}.key"] == onnx.TensorProto.FLOAT16
        assert types[f"past_key_values.{i}.value"] == onnx.TensorProto.FLOAT16
    assert types["input_ids"] == onnx.TensorProto.INT64
    outputs = {o.name: o.type.tensor_type.elem_type for o in model.graph.output}
    assert outputs["logits"] == onnx.TensorProto.FLOAT16
    # The f16 data file holds half the bytes of the f32 one.
    size16 = (out16 / "model.onnx.data").stat().st_size
    size32 = (out32 / "model.onnx.data").stat().st_size
    assert size16 < 0.6 * size32

    prefill16, step16 = prefill_and_step(out16 / "model.onnx", np.float16)
    prefill32, step32 = prefill_and_step(out32 / "model.onnx", np.float32)
    assert prefill16.dtype == np.float16 and prefill16.shape == (1, 3, VOCAB)
    assert step16.shape == (1, 1, VOCAB)
    assert np.isfinite(prefill16).all() and np.isfinite(step16).all()
    # Half precision differs from the f32 build only by rounding.
    scale = float(np.abs(prefill32).max())
    np.testing.assert_allclose(prefill16.astype(np.float32), prefill32, atol=1e-2 * scale)
    np.testing.assert_allclose(step16.astype(np.float32), step32, atol=1e-2 * scale)


def test_default_dtype_is_the_checkpoints_own_bf16(
    capsys, make_tiny_llama, tiny_llama_arrays, tmp_path: Path
) -> None:
    bf16 = {k: v.astype(ml_dtypes.bfloat16) for k, v in tiny_llama_arrays.items()}
    source = make_tiny_llama("bf16-llama", tensors=bf16)
    raw = (source / "model.safetensors").read_bytes()
    header = json.loads(raw[8 : 8 + struct.unpack("<Q", raw[:8])[0]])
    assert header["model.norm.weight"]["dtype"] == "BF16"

    out = tmp_path / "out"
    build(capsys, source, out)
    model = load_graph(out)
    weights = weight_initializers(model)
    assert {t.data_type for t in weights.values()} == {onnx.TensorProto.BFLOAT16}
    assert input_types(model)["past_key_values.0.key"] == onnx.TensorProto.BFLOAT16
    onnx.checker.check_model(str(out / "model.onnx"))


def test_explicit_dtype_overrides_the_checkpoints(
    capsys, make_tiny_llama, tiny_llama_arrays, tmp_path: Path
) -> None:
    bf16 = {k: v.astype(ml_dtypes.bfloat16) for k, v in tiny_llama_arrays.items()}
    source = make_tiny_llama("bf16-llama", tensors=bf16)
    out = tmp_path / "out"
    build(capsys, source, out, "--dtype", "f32")
    weights = weight_initializers(load_graph(out))
    assert {t.data_type for t in weights.values()} == {onnx.TensorProto.FLOAT}


def test_no_weights_makes_parameters_graph_inputs(
    capsys, tiny_llama_dir: Path, tiny_llama_arrays, tmp_path: Path
) -> None:
    out = tmp_path / "graph-only"
    build(capsys, tiny_llama_dir, out, "--no-weights")
    onnx.checker.check_model(str(out / "model.onnx"))
    model = load_graph(out)
    assert weight_initializers(model) == {}
    assert all(t.data_location != onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    data = out / "model.onnx.data"
    assert not data.exists() or data.stat().st_size == 0  # no weights stored
    types = input_types(model)
    assert set(tiny_llama_arrays) <= set(types)
    assert {types[name] for name in tiny_llama_arrays} == {onnx.TensorProto.FLOAT}
    shapes = {
        i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input
    }
    assert shapes["lm_head.weight"] == [32, 64]  # the graph's own [in, out] layout
    assert shapes["model.norm.weight"] == [32]

    # Fed the weights as inputs, the graph computes what the full build does.
    full = tmp_path / "full"
    build(capsys, tiny_llama_dir, full)
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    params = {
        name: np.ascontiguousarray(array.T if name.endswith(LINEAR) else array)
        for name, array in tiny_llama_arrays.items()
    }
    (logits,) = session.run(["logits"], {**feeds(3, 0, np.float32), **params})
    expected, _ = prefill_and_step(full / "model.onnx", np.float32)
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)


def test_no_weights_needs_no_checkpoint(capsys, tiny_llama_dir: Path, tmp_path: Path) -> None:
    (tiny_llama_dir / "model.safetensors").unlink()
    out = tmp_path / "graph-only"
    build(capsys, tiny_llama_dir, out, "--no-weights")
    assert (out / "model.onnx").is_file()


def test_model_type_builds_the_checkpoint_as_that_key(capsys, tiny_llama_dir, tmp_path) -> None:
    out = tmp_path / "as-mistral"
    build(capsys, tiny_llama_dir, out, "--model-type", "mistral", "--no-weights")
    record = json.loads((out / "mobius.json").read_text())
    assert [m["model_type"] for m in record["models"]] == ["mistral"]
    code, _, stderr = run_cli(
        capsys, "build", "--model", str(tiny_llama_dir), str(tmp_path / "x"), "--model-type", "nope"
    )
    assert code != 0 and "nope" in stderr and not (tmp_path / "x").exists()


def test_a_processor_nested_in_processor_config_is_unfolded(capsys, tiny_llama_dir, tmp_path):
    """transformers 5 saves a processor's feature extractor inside processor_config.json;
    the package gets it as preprocessor_config.json, where the runners read it."""
    settings = {"feature_size": 80, "sampling_rate": 16000}
    processor = {"feature_extractor": settings, "processor_class": "SomeProcessor"}
    (tiny_llama_dir / "processor_config.json").write_text(json.dumps(processor))
    build(capsys, tiny_llama_dir, tmp_path / "nested", "--no-weights")
    assert json.loads((tmp_path / "nested" / "preprocessor_config.json").read_text()) == settings
    # onnxruntime-genai reads a processor_config.json of its own: the HF one stays out
    assert not (tmp_path / "nested" / "processor_config.json").exists()
    (tiny_llama_dir / "preprocessor_config.json").write_text(json.dumps({"own": 1}))
    build(capsys, tiny_llama_dir, tmp_path / "own", "--no-weights")
    assert json.loads((tmp_path / "own" / "preprocessor_config.json").read_text()) == {"own": 1}
