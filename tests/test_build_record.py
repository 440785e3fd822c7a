"""The build record of the sources a domain package reads: a GGUF file, a diffusers pipeline.

The tiny local model's record, field by field, is in
``packages/mobius-core/tests/test_record.py``; here the real SmolLM2 GGUF (one
file; one build of about 20 s shared by the module) and a tiny Stable Diffusion
pipeline (several components, two domain packages, one weight file per component).
"""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path

import onnx
import pytest

import mobius
from mobius._record import RECORD_FILE
from mobius.cli import main
from mobius_text.testing import smollm2_gguf


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def record_of(directory: Path) -> dict:
    return json.loads((directory / RECORD_FILE).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def gguf_package(tmp_path_factory) -> Path:
    """SmolLM2's GGUF built by the CLI, once for the module (~20 s)."""
    out = tmp_path_factory.mktemp("gguf") / "out"
    assert main(["build", "--model", str(smollm2_gguf()), str(out), "--ep", "cpu", "-q"]) == 0
    return out


def test_gguf_record(gguf_package: Path) -> None:
    gguf = smollm2_gguf()
    record = record_of(gguf_package)
    assert record["versions"] == {
        "mobius-core": mobius.__version__,
        "mobius-text": metadata.version("mobius-text"),
    }
    assert record["source"] == {
        "kind": "file",
        "path": str(gguf),
        "files": [{"name": gguf.name, "bytes": gguf.stat().st_size, "sha256": sha256(gguf)}],
    }
    [model] = record["models"]
    assert (model["model_type"], model["package"], model["task"]) == (
        "llama",
        "mobius-text",
        "causal-lm",
    )
    assert model["verified"] is True and model["graphs"] == ["model"]
    assert record["options"]["ep"] == "cpu" and record["options"]["quant"]["method"] is None
    graph = record["graphs"]["model"]
    assert graph["data_bytes"] == (gguf_package / "model.onnx.data").stat().st_size
    # 30 layers, 3 KV heads of 64; the vocabulary of 49152 in the logits.
    assert len(graph["inputs"]) == 3 + 2 * 30
    assert graph["inputs"][3] == {
        "name": "past_key_values.0.key",
        "dtype": "float32",
        "shape": ["batch", 3, "past_sequence", 64],
    }
    assert graph["outputs"][0] == {
        "name": "logits",
        "dtype": "float32",
        "shape": ["batch", "sequence", 49152],
    }
    onnx_model = onnx.load(gguf_package / "model.onnx", load_external_data=False)
    assert onnx_model.producer_name == "mobius"
    props = {p.key: p.value for p in onnx_model.metadata_props}
    assert props["mobius.source"] == str(gguf) and props["mobius.model_type"] == "llama"


def test_gguf_info(capsys, gguf_package: Path) -> None:
    gguf = smollm2_gguf()
    assert main(["info", str(gguf_package)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"source            file {gguf}" in out
    [line] = [line for line in out if line.startswith(f"  {gguf.name}  ")]
    assert line.endswith(f"sha256 {record_of(gguf_package)['source']['files'][0]['sha256']}")
    assert "    outputs  logits" in "\n".join(out)


def test_pipeline_record(tmp_path: Path) -> None:
    """Several components: a row per model type with its graphs, a file per component."""
    from pipeline_cases import make_sd_pipeline

    source = tmp_path / "sd"
    make_sd_pipeline(source)
    out = mobius.build(source).save(tmp_path / "out", progress=False)
    record = record_of(out)
    assert record["task"] == "pipeline"
    assert set(record["versions"]) == {"mobius-core", "mobius-text", "mobius-diffusion"}
    rows = {
        row["model_type"]: (row["package"], row["task"], row["graphs"]) for row in record["models"]
    }
    assert rows == {
        "clip_text_model": ("mobius-text", "feature-extraction", ["text_encoder/model"]),
        "UNet2DConditionModel": ("mobius-diffusion", "denoising", ["unet/model"]),
        "AutoencoderKL": ("mobius-diffusion", "vae", ["vae/encoder/model", "vae/decoder/model"]),
    }
    files = record["source"]["files"]
    assert [f["name"] for f in files] == [
        "text_encoder/model.safetensors",
        "unet/diffusion_pytorch_model.safetensors",
        "vae/diffusion_pytorch_model.safetensors",  # read once for both VAE graphs
    ]
    for file in files:
        assert file["sha256"] == sha256(source / file["name"]), file["name"]
    # the pipeline's own options
    assert record["options"]["plugin"] == {"skip_component": None, "ip_adapter": None}
    assert set(record["graphs"]) == {
        "text_encoder/model", "unet/model", "vae/encoder/model", "vae/decoder/model",
    }  # fmt: skip
    for name, graph in record["graphs"].items():
        assert graph["bytes"] == (out / f"{name}.onnx").stat().st_size
        props = {
            p.key: p.value
            for p in onnx.load(out / f"{name}.onnx", load_external_data=False).metadata_props
        }
        assert props["mobius.model_type"] in rows and props["mobius.source"] == str(source)
