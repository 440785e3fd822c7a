"""``mobius build --validate`` on mobius-diffusion's components: tiny ones pass, broken ones fail.

One tiny random component per task (every parameter perturbed; the parity tests'
cases): an AutoencoderKL (``vae``), an SD3 transformer (``denoising``), a ControlNet
(``controlnet``), a T2I-Adapter directory and IP-Adapter files (``adapter``: plain, and
FaceID Plus with its two inputs and outputs), each
built with ``--validate`` through the CLI against diffusers' own reading. A package
whose weight was changed after the build fails; without torch a smoke inference of
the same feeds passes.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from safetensors.numpy import save_file
from test_autoencoder_kl_parity import CASES as VAE_CASES
from test_controlnet_parity import CASES as CONTROLNET_CASES
from test_ip_adapter_parity import ip_adapter_tensors
from test_sd3_parity import CASES as SD3_CASES
from test_t2i_adapter_parity import CASES as T2I_CASES

import mobius.validate
from mobius.cli import main
from mobius.errors import MobiusError
from mobius.validate import validate_package
from mobius_diffusion.testing import make_random_diffusers_model
from mobius_diffusion.testing._ip_adapter import random_image_proj

#: The bar of these float32 tiny components (the parity tests').
ATOL = 1e-4

#: task -> (class, config, a weight to break, the graph holding it)
COMPONENTS = {
    "vae": ("AutoencoderKL", VAE_CASES["two-layers"], "decoder.conv_out.weight", "decoder/model"),
    "denoising": ("SD3Transformer2DModel", SD3_CASES["sd3"], "proj_out.weight", "model"),
    "controlnet": ("ControlNetModel", CONTROLNET_CASES["options"], "controlnet_mid_block.weight", "model"),
    "adapter": ("T2IAdapter", T2I_CASES["full-adapter"], "adapter.conv_in.weight", "model"),
}  # fmt: skip


def _build(source: Path, out: Path) -> Path:
    assert main(["build", "--model", str(source), str(out), "-q", "--validate"]) == 0
    return out


def _validation(out: Path) -> dict:
    return json.loads((out / "mobius.json").read_text())["validation"]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Each task's component source and its package, built with --validate."""
    root = tmp_path_factory.mktemp("components")
    packages = {}
    for task, (class_name, config, _, _) in COMPONENTS.items():
        source = root / task / "hf"
        make_random_diffusers_model(class_name, config).save_pretrained(source)
        packages[task] = source, _build(source, root / task / "out")
    ip_file = root / "ip-adapter.safetensors"
    save_file(ip_adapter_tensors("ip-adapter"), ip_file)
    packages["ip-adapter"] = ip_file, _build(ip_file, root / "ip-out")
    face_file = root / "ip-adapter-faceid-plus.safetensors"  # two inputs and two outputs
    save_file(random_image_proj("faceid-plus", 24, 16), face_file)
    packages["faceid-plus"] = face_file, _build(face_file, root / "face-out")
    return packages


@pytest.mark.parametrize("task", [*COMPONENTS, "ip-adapter", "faceid-plus"])
def test_component_validates_against_diffusers(built, task):
    validation = _validation(built[task][1])
    assert validation["passed"] is True, validation
    assert validation["reference"].startswith("diffusers")
    assert validation["diffs"] and max(validation["diffs"].values()) <= ATOL, validation
    assert "max(1, max |reference|)" in validation["note"]


def test_every_graph_is_compared(built):
    diffs = _validation(built["vae"][1])["diffs"]
    assert set(diffs) == {"encoder/model:latent_parameters", "decoder/model:sample"}
    controlnet = _validation(built["controlnet"][1])["diffs"]
    assert (
        "model:mid_block_res_sample" in controlnet
        and "model:down_block_res_samples.0" in controlnet
    )


@pytest.mark.parametrize("task", COMPONENTS)
def test_a_changed_weight_fails(built, task, tmp_path):
    source, out = built[task]
    _, _, weight, graph = COMPONENTS[task]
    broken = shutil.copytree(out, tmp_path / "broken")
    path = broken / f"{graph}.onnx"
    model = onnx.load(str(path))
    tensor = next(t for t in model.graph.initializer if t.name == weight)
    values = onnx.numpy_helper.to_array(tensor) * 1.5 + 0.1  # what a misread field would do
    tensor.CopyFrom(onnx.numpy_helper.from_array(values.astype(np.float32), tensor.name))
    onnx.save(model, str(path), save_as_external_data=True, location=path.name + ".data")
    report = validate_package(broken, source)
    assert not report.passed
    assert any("max abs diff" in reason for reason in report.failures())
    assert _validation(broken)["passed"] is False


@pytest.mark.parametrize("task", [*COMPONENTS, "ip-adapter"])
def test_without_torch_a_smoke_inference_runs(built, task, monkeypatch, tmp_path):
    source, out = built[task]
    monkeypatch.setattr(mobius.validate, "reference_missing", lambda *names: "torch")
    report = validate_package(shutil.copytree(out, tmp_path / "copy"), source)
    assert report.reference is None and report.passed, report.summary()
    assert "smoke inference on a batch of 2 seeded samples" in report.summary()
    assert "needs torch and diffusers" in report.note


def test_without_diffusers_a_smoke_inference_runs(built, monkeypatch, tmp_path):
    source, out = built["denoising"]
    real = mobius.validate.reference_missing
    monkeypatch.setattr(
        mobius.validate,
        "reference_missing",
        lambda *names: "diffusers" if "diffusers" in names else real(*names),
    )
    report = validate_package(shutil.copytree(out, tmp_path / "copy"), source)
    assert report.reference is None and report.passed
    assert "pip install torch diffusers" in report.note


def test_a_record_naming_a_graph_outside_the_package_is_refused(built, tmp_path):
    source, out = built["denoising"]
    copy = shutil.copytree(out, tmp_path / "copy")
    record = json.loads((copy / "mobius.json").read_text())
    record["models"][0]["graphs"] = ["../../elsewhere/model"]
    (copy / "mobius.json").write_text(json.dumps(record))
    with pytest.raises(
        MobiusError, match="names a graph '../../elsewhere/model' the package lacks"
    ):
        validate_package(copy, source)


def test_pipeline_validator_checks_each_component(built, tmp_path):
    """--validate on a pipeline package runs each component's validator against the
    pipeline directory's own component."""
    from mobius_diffusion.validate import validate_pipeline

    source = tmp_path / "pipeline"
    shutil.copytree(built["denoising"][0], source / "transformer")
    shutil.copytree(built["vae"][0], source / "vae")
    index = {
        "_class_name": "StableDiffusion3Pipeline",
        "transformer": ["diffusers", "SD3Transformer2DModel"],
        "vae": ["diffusers", "AutoencoderKL"],
    }
    (source / "model_index.json").write_text(json.dumps(index))
    out = tmp_path / "out"
    assert main(["build", "--model", str(source), str(out), "-q", "--validate"]) == 0
    record = json.loads((out / "mobius.json").read_text())
    assert record["task"] == "pipeline" and record["validation"]["passed"]
    report = validate_pipeline(out, source, record, True)
    assert report.passed and max(report.diffs.values()) <= ATOL
    assert set(report.diffs) == {
        "transformer/model:out_hidden_states",
        "vae/encoder/model:latent_parameters",
        "vae/decoder/model:sample",
    }
    assert report.reference == (
        "transformer: diffusers SD3Transformer2DModel; vae: diffusers AutoencoderKL"
    )
    smoke = validate_pipeline(out, source, record, False)
    assert smoke.reference is None and smoke.passed
