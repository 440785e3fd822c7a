"""mobius-diffusion registers each component class once (a task, a parity test), and its slice."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

import mobius
import mobius_diffusion
from mobius import registry
from mobius.errors import MobiusError
from mobius.generate import run_text_cli

PACKAGE_DIR = Path(__file__).resolve().parents[1]


def _support_script():
    spec = importlib.util.spec_from_file_location(
        "diffusion_support_table", PACKAGE_DIR / "scripts" / "support_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_model_files_import():
    assert mobius_diffusion.LOAD_ERRORS == {}


def test_every_registered_class_has_a_parity_test():
    """support_table.py maps each class to its parity test; that test file must exist and hold it."""
    kits = {
        cls: (task, file, test)
        for task, _heading, _covers, table in _support_script().KITS
        for cls, (file, test) in table.items()
    }
    for key, module in mobius_diffusion.model_types().items():
        assert key in kits, f"{key} has no parity test listed in scripts/support_table.py"
        task, file, test = kits[key]
        assert module.task == task, f"{key} is a {module.task} model, listed under {task}"
        source = (PACKAGE_DIR / "tests" / file).read_text(encoding="utf-8")
        assert f"def {test}(" in source, f"{file} has no {test}"


def test_registered_through_the_plugin():
    for key, module in mobius_diffusion.model_types().items():
        entry = registry.get(key)
        assert entry.package == "mobius-diffusion"
        assert entry.task == module.task and module.task in registry.tasks()


def test_the_slice_is_registered_by_this_package():
    """Tasks, source recognisers, options and the image runner: all mobius-diffusion's."""
    tasks = registry.tasks()
    for name in ("vae", "denoising", "controlnet", "adapter"):
        assert tasks[name].package == "mobius-diffusion"
    sources = {s.name: s.package for s in registry.sources()}
    for name in ("diffusers-pipeline", "diffusers-component", "safetensors-adapter"):
        assert sources[name] == "mobius-diffusion"
    options = {
        (o.command, o.dest) for o in registry.options("build") + registry.options("generate")
    }
    assert ("build", "skip_component") in options
    for dest in ("steps", "height", "width"):
        assert ("generate", dest) in options
    # --guidance-scale is core's: image, music and speech generators share it
    assert ("generate", "guidance_scale") in options
    runner = next(r for r in registry.runners() if r.package == "mobius-diffusion")
    assert runner.help and runner.examples


def test_pipeline_options_refused_elsewhere(tmp_path):
    """--skip-component on a build that is no pipeline, --output on a package core runs."""
    vae = tmp_path / "vae"
    vae.mkdir()
    config = dict(
        _class_name="AutoencoderKL", in_channels=3, out_channels=3, latent_channels=4,
        down_block_types=["DownEncoderBlock2D"], up_block_types=["UpDecoderBlock2D"],
        block_out_channels=[8], layers_per_block=1, norm_num_groups=4,
    )  # fmt: skip
    (vae / "config.json").write_text(json.dumps(config))
    package = mobius.build(vae, load_weights=False)
    assert sorted(package.models) == ["decoder/model", "encoder/model"]
    with pytest.raises(MobiusError, match="--skip-component applies to pipeline"):
        mobius.build(vae, load_weights=False, skip_component=["unet"])
    with pytest.raises(MobiusError, match="--steps applies to diffusion pipelines"):
        run_text_cli(tmp_path / "text-out", "hi", {"output_file": None, "steps": 30})
    with pytest.raises(MobiusError, match="--output is for packages that write a file"):
        run_text_cli(tmp_path / "text-out", "hi", {"output_file": "x.png"})


def test_a_hub_pipeline_is_fetched_with_its_component_folders(tmp_path, monkeypatch):
    """Core's first snapshot finds model_index.json; the diffusion source names the second download."""
    import huggingface_hub
    from huggingface_hub import constants

    from mobius.weights import resolve_model

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    snapshot = tmp_path / "snapshot"
    calls = []

    def fake(repo_id, allow_patterns=None, ignore_patterns=None, **kwargs):
        calls.append((list(allow_patterns), ignore_patterns))
        snapshot.mkdir(exist_ok=True)
        (snapshot / "model_index.json").write_text("{}")
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    assert resolve_model("org/pipeline") == snapshot
    assert len(calls) == 2
    allow, ignore = calls[1]
    assert "*/*.safetensors" in allow and "*/*.bin" not in allow
    assert "*/*.*.safetensors" in ignore  # other weight variants are left out

    calls.clear()
    resolve_model("org/pipeline", allow_pickle=True)
    assert "*/*.bin" in calls[1][0]
