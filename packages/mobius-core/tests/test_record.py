"""The build record: ``mobius.json`` in every package, the ONNX producer fields, ``mobius info PKG``.

A tiny Llama (written with numpy, built in well under a second) is built from a
directory and from a hub cache snapshot; every field of its record is checked.
The GGUF and pipeline records are in the root ``tests/test_build_record.py``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from importlib import metadata
from pathlib import Path

import onnx
import onnx_ir as ir
import pytest

import mobius
from mobius import ModelPackage
from mobius._record import RECORD_FILE, RECORD_FORMAT, read_record
from mobius.cli import main

COMMIT = "0123456789abcdef0123456789abcdef01234567"
TEXT_VERSION = metadata.version("mobius-text")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record_of(directory: Path) -> dict:
    return json.loads((directory / RECORD_FILE).read_text(encoding="utf-8"))


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def kv(layer: int, kind: str, past: str) -> list[dict]:
    shape = ["batch", 2, past, 8]  # tiny Llama: 2 KV heads of 8
    return [
        {"name": f"{prefix}.{layer}.{kind}", "dtype": "float32", "shape": shape}
        for prefix in (["past_key_values"] if past == "past_sequence" else ["present"])
    ]


def test_record_of_a_local_model_has_every_field(tiny_llama_dir: Path, tmp_path: Path) -> None:
    out = mobius.build(str(tiny_llama_dir), ep="cpu", dtype="f16").save(
        tmp_path / "out", progress=False
    )
    record = record_of(out)
    weights = tiny_llama_dir / "model.safetensors"
    assert list(record) == [
        "format", "schema", "versions", "task", "source", "models", "options", "graphs",
    ]  # fmt: skip
    assert (record["format"], record["schema"]) == (RECORD_FORMAT, 1)
    assert record["versions"] == {"mobius-core": mobius.__version__, "mobius-text": TEXT_VERSION}
    assert record["task"] == "causal-lm"
    assert record["source"] == {
        "kind": "directory",
        "path": str(tiny_llama_dir),
        "files": [
            {
                "name": "model.safetensors",
                "bytes": weights.stat().st_size,
                "sha256": sha256(weights),
            }
        ],
    }
    [model] = record["models"]
    assert model == {
        "model_type": "llama",
        "package": "mobius-text",
        "package_version": TEXT_VERSION,
        "task": "causal-lm",
        "verified": True,
        "verified_by": mobius.registry.verified_by("llama"),
        "graphs": ["model"],
    }
    # The test that verifies the type, as mobius-text's verified.json names it.
    assert model["verified_by"] == "mobius-text: tests/test_parity.py::test_causal_lm_parity"
    options = record["options"]
    assert options["dtype"] == "f16" and options["ep"] == "cpu" and options["load_weights"] is True
    assert options["runtime"] == "auto" and options["revision"] is None
    assert options["quant"]["method"] is None and options["quant"]["block_size"] == 32
    # Every field of BuildOptions and QuantOptions, and no plugin option applies to a causal LM.
    assert set(options) == {f for f in mobius.BuildOptions.__dataclass_fields__}
    assert set(options["quant"]) == {f for f in mobius.QuantOptions.__dataclass_fields__}
    assert options["plugin"] == {}

    graph = record["graphs"]["model"]
    assert graph["file"] == "model.onnx" and graph["data_file"] == "model.onnx.data"
    assert graph["bytes"] == (out / "model.onnx").stat().st_size
    assert graph["data_bytes"] == (out / "model.onnx.data").stat().st_size > 0
    assert graph["opset"] == 23
    f16 = "float16"
    assert graph["inputs"][:3] == [
        {"name": "input_ids", "dtype": "int64", "shape": ["batch", "sequence"]},
        {"name": "attention_mask", "dtype": "int64", "shape": ["batch", "total_sequence"]},
        {"name": "position_ids", "dtype": "int64", "shape": ["batch", "sequence"]},
    ]
    assert graph["inputs"][3] == {
        "name": "past_key_values.0.key", "dtype": f16, "shape": ["batch", 2, "past_sequence", 8],
    }  # fmt: skip
    assert len(graph["inputs"]) == 3 + 2 * 2
    assert graph["outputs"][0] == {
        "name": "logits", "dtype": f16, "shape": ["batch", "sequence", 64],
    }  # fmt: skip
    assert graph["outputs"][1]["name"] == "present.0.key"
    assert graph["parameters_as_inputs"] == 0
    # What mobius info reads back is the file itself, checked.
    assert read_record(out) == record


def test_onnx_files_name_their_producer_and_source(tiny_llama_dir: Path, tmp_path: Path) -> None:
    out = mobius.build(tiny_llama_dir).save(tmp_path / "out", progress=False)
    model = onnx.load(out / "model.onnx", load_external_data=False)
    assert (model.producer_name, model.producer_version) == ("mobius", mobius.__version__)
    assert {p.key: p.value for p in model.metadata_props} == {
        "mobius.model_type": "llama",
        "mobius.task": "causal-lm",
        "mobius.registered_by": f"mobius-text {TEXT_VERSION}",
        "mobius.verified": "yes",
        "mobius.source": str(tiny_llama_dir),
        "mobius.version": mobius.__version__,
    }


def test_weightless_record_lists_the_contract_not_the_parameters(
    tiny_llama_dir: Path, tmp_path: Path
) -> None:
    out = mobius.build(tiny_llama_dir, load_weights=False).save(tmp_path / "out", progress=False)
    record = record_of(out)
    assert record["source"]["files"] == []  # no weights read
    assert record["options"]["load_weights"] is False
    graph = record["graphs"]["model"]
    assert [v["name"] for v in graph["inputs"]][:3] == [
        "input_ids",
        "attention_mask",
        "position_ids",
    ]
    assert len(graph["inputs"]) == 3 + 2 * 2
    assert graph["parameters_as_inputs"] == 21  # every parameter, as a graph input
    assert len(onnx.load(out / "model.onnx").graph.input) == 3 + 2 * 2 + 21


def test_hub_source_records_id_revision_and_commit(tiny_llama_dir: Path, tmp_path: Path) -> None:
    """A snapshot in the (offline) hub cache: the id and the commit, never the cache path."""
    from huggingface_hub import constants

    repo = Path(constants.HF_HUB_CACHE) / "models--org--tiny"
    snapshot = repo / "snapshots" / COMMIT
    shutil.copytree(tiny_llama_dir, snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)

    out = mobius.build("org/tiny", revision="main").save(tmp_path / "out", progress=False)
    record = record_of(out)
    assert record["source"] == {
        "kind": "hub",
        "id": "org/tiny",
        "revision": "main",
        "commit": COMMIT,
        "files": [
            {
                "name": "model.safetensors",
                "bytes": (snapshot / "model.safetensors").stat().st_size,
                "sha256": sha256(snapshot / "model.safetensors"),
            }
        ],
    }
    assert str(constants.HF_HUB_CACHE) not in (out / RECORD_FILE).read_text()
    props = {p.key: p.value for p in onnx.load(out / "model.onnx").metadata_props}
    assert props["mobius.source"] == f"hub:org/tiny@{COMMIT}"


def test_saving_twice_writes_the_same_record(tiny_llama_dir: Path, tmp_path: Path) -> None:
    """No timestamp, host or cache path: the record depends only on the build."""
    package = mobius.build(tiny_llama_dir)
    first = package.save(tmp_path / "a", progress=False)
    second = package.save(tmp_path / "b", progress=False)
    assert (first / RECORD_FILE).read_bytes() == (second / RECORD_FILE).read_bytes()


def test_package_made_without_build_has_a_record_too(tmp_path: Path) -> None:
    """A package of hand-made graphs: no source, options or model type, but graphs and producer."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["n", 3]))
    node = ir.node("Relu", [x])
    node.outputs[0].name = "y"
    node.outputs[0].dtype, node.outputs[0].shape = ir.DataType.FLOAT, ir.Shape(["n", 3])
    graph = ir.Graph([x], node.outputs, nodes=[node], opset_imports={"": 23})
    package = ModelPackage(models={"model": ir.Model(graph, ir_version=10)}, task="custom")
    out = package.save(tmp_path / "out", progress=False)
    record = record_of(out)
    assert record["source"] is None and record["options"] is None and record["models"] == []
    assert record["versions"] == {"mobius-core": mobius.__version__}
    assert record["graphs"]["model"]["inputs"] == [
        {"name": "x", "dtype": "float32", "shape": ["n", 3]}
    ]
    assert record["graphs"]["model"]["data_bytes"] == 0  # no initializers: an empty data file
    model = onnx.load(out / "model.onnx")
    assert (model.producer_name, model.producer_version) == ("mobius", mobius.__version__)
    assert {p.key: p.value for p in model.metadata_props} == {
        "mobius.version": mobius.__version__,
        "mobius.task": "custom",
    }
    assert read_record(out) == record


# -- mobius info PKG ------------------------------------------------------------------------


@pytest.fixture
def built(tiny_llama_dir: Path, tmp_path: Path) -> Path:
    return mobius.build(tiny_llama_dir, ep="cpu").save(tmp_path / "out", progress=False)


def test_info_shows_a_package_record(capsys, built: Path, tiny_llama_dir: Path) -> None:
    code, out, err = run_cli(capsys, "info", str(built))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"package           {built}"
    assert (
        lines[1]
        == f"built by          mobius-core {mobius.__version__}, mobius-text {TEXT_VERSION}"
    )
    assert lines[2] == "task              causal-lm"
    assert (
        lines[3]
        == f"model type        llama, registered by mobius-text {TEXT_VERSION}, task causal-lm"
    )
    assert lines[4] == (
        "  verified        yes, by mobius-text: tests/test_parity.py::test_causal_lm_parity"
    )
    assert lines[5] == f"source            directory {tiny_llama_dir}"
    assert lines[6].startswith("  model.safetensors  ") and "sha256 " in lines[6]
    assert "  ep                    cpu" in lines
    assert "  quant.block_size      32" in lines
    assert "  dtype                 not set" in lines
    assert any(line.startswith("  model: model.onnx ") and "opset 23" in line for line in lines)
    assert "    inputs   input_ids                int64 [batch, sequence]" in lines
    assert "    outputs  logits                   float32 [batch, sequence, 64]" in lines
    assert lines[-1].startswith("total ")


def test_info_json_is_the_record(capsys, built: Path) -> None:
    code, out, err = run_cli(capsys, "info", str(built), "--json")
    assert code == 0, err
    assert json.loads(out) == record_of(built)


def test_info_on_a_directory_that_is_neither_says_so(capsys, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    code, out, err = run_cli(capsys, "info", str(tmp_path))
    assert code == 1 and out == ""
    assert "is neither a package built by mobius (no mobius.json" in err
    assert "nor a model source" in err


def test_info_on_graphs_without_a_record(capsys, built: Path) -> None:
    (built / RECORD_FILE).unlink()
    code, _, err = run_cli(capsys, "info", str(built))
    assert code == 1
    assert "holds ONNX graphs but no mobius.json" in err


def test_info_refuses_a_revision_for_a_package(capsys, built: Path) -> None:
    code, _, err = run_cli(capsys, "info", str(built), "--revision", "main")
    assert code == 1 and "--revision is for hub ids" in err


def _corrupt(record: dict, path: list, value) -> dict:
    target = record
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return record


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["format"], "something-else", "format is 'something-else'"),
        (["schema"], 99, "schema 99 is newer"),
        (["task"], 3, "task must be a string, not int"),
        (["versions", "mobius-core"], ["x"], "versions.mobius-core must be a string or null"),
        (["source", "kind"], "ftp", "source.kind 'ftp' is not one of"),
        (["source", "path"], None, "source.path must be a string, not NoneType"),
        (["source", "files", 0, "bytes"], True, "source.files[0].bytes must be an integer"),
        (["models", 0, "verified"], "yes", "models[0].verified must be true or false or null"),
        (["graphs", "model", "inputs", 0, "shape"], "batch", "shape must be null or a list"),
        (["graphs", "model", "inputs", 0, "shape", 0], 1.5, "shape[0] must be an integer"),
        (["graphs", "model"], KeyError, "the record has no"),
        (["graphs", "model", "outputs"], KeyError, "graphs.model has no 'outputs'"),
        (["options"], [], "options must be null or an object"),
    ],
)
def test_info_refuses_a_malformed_record(capsys, built: Path, path, value, message) -> None:
    record = _corrupt(record_of(built), path, value)
    if path == ["graphs", "model"]:
        record = {k: v for k, v in record.items() if k != "graphs"}
    (built / RECORD_FILE).write_text(json.dumps(record))
    code, out, err = run_cli(capsys, "info", str(built))
    assert code == 1 and out == "", err
    assert "is not a valid build record" in err or "schema 99" in err
    assert message in err


@pytest.mark.parametrize("text", ["not json", "[1, 2]", "[" * 100_000, ""])
def test_info_refuses_a_record_that_is_not_json_object(capsys, built: Path, text: str) -> None:
    (built / RECORD_FILE).write_text(text)
    code, _, err = run_cli(capsys, "info", str(built))
    assert code == 1 and err.startswith("mobius: error: ")


def test_info_escapes_control_characters_from_a_record(capsys, built: Path) -> None:
    """A stranger's record must not drive the terminal (an ANSI escape in a path)."""
    record = record_of(built)
    record["source"]["path"] = "\x1b[2J/evil\n"
    record["graphs"]["model"]["inputs"][0]["name"] = "\x07bell"
    (built / RECORD_FILE).write_text(json.dumps(record))
    for argv in ([], ["--json"]):
        code, out, err = run_cli(capsys, "info", str(built), *argv)
        assert code == 0, err
        assert "\x1b" not in out and "\x07" not in out
    code, out, _ = run_cli(capsys, "info", str(built))
    assert "source            directory \\x1b[2J/evil\\n" in out.splitlines()


def test_info_refuses_a_record_that_is_a_device(capsys, built: Path) -> None:
    """A link to /dev/zero would be read forever: only a regular file is read, at most 16 MiB."""
    (built / RECORD_FILE).unlink()
    (built / RECORD_FILE).symlink_to("/dev/zero")
    code, _, err = run_cli(capsys, "info", str(built))
    assert code == 1 and "is not a regular file" in err


def test_info_refuses_options_nested_too_deep(capsys, built: Path) -> None:
    record = record_of(built)
    deep: list = []
    record["options"]["plugin"]["x"] = deep
    for _ in range(20):
        deep.append([])
        deep = deep[0]
    (built / RECORD_FILE).write_text(json.dumps(record))
    code, _, err = run_cli(capsys, "info", str(built))
    assert code == 1 and "options nest deeper than 8 levels" in err


def test_info_of_a_source_shipping_onnx_graphs_describes_the_source(
    capsys, tiny_llama_dir: Path
) -> None:
    """A hub repository with ``onnx/model.onnx`` beside ``config.json`` is a source, not a package."""
    (tiny_llama_dir / "onnx").mkdir()
    (tiny_llama_dir / "onnx" / "model.onnx").write_bytes(b"not read")
    code, out, err = run_cli(capsys, "info", str(tiny_llama_dir), "--json")
    assert code == 0, err
    assert json.loads(out)["model_type"] == "llama"


def test_info_of_a_part_of_a_package_names_the_package(capsys, built: Path) -> None:
    part = built / "part"
    part.mkdir()
    shutil.copyfile(built / "model.onnx", part / "model.onnx")
    code, _, err = run_cli(capsys, "info", str(part))
    assert code == 1 and f"is one part of the package {built}" in err
