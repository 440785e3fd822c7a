"""``mobius build`` of a whole diffusers pipeline: the layout, what is copied, what is refused.

The components here are small and quick (a T2I-Adapter and a CLIP text encoder stand in
for any model component); the Stable Diffusion and Flux end-to-end runs are in
``test_pipeline_sd.py`` and ``test_pipeline_flux.py``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import constants
from pipeline_cases import tiny_clip_tokenizer

from mobius.cli import main
from mobius.errors import ConfigError, ModelSourceError
from mobius.weights import _resolve
from mobius_diffusion.pipeline_source import build_pipeline, pipeline_components

ADAPTER = dict(in_channels=3, channels=[8, 16], num_res_blocks=1, downscale_factor=2)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    """A pipeline folder: an adapter, a CLIP text encoder, a tokenizer, a scheduler, a null slot."""
    import diffusers
    from transformers import CLIPTextConfig, CLIPTextModel

    from mobius.testing import perturb_parameters
    from mobius_diffusion.testing import make_random_diffusers_model

    root = tmp_path_factory.mktemp("pipeline") / "hf"
    make_random_diffusers_model("T2IAdapter", ADAPTER).save_pretrained(root / "adapter")
    tokenizer = tiny_clip_tokenizer(root.parent / "tok")
    tokenizer.save_pretrained(root / "tokenizer")
    config = CLIPTextConfig(
        vocab_size=len(tokenizer), hidden_size=8, intermediate_size=16, num_hidden_layers=1,
        num_attention_heads=2, max_position_embeddings=12, bos_token_id=0, eos_token_id=1,
    )  # fmt: skip
    text_encoder = CLIPTextModel(config)
    perturb_parameters(text_encoder)
    text_encoder.save_pretrained(root / "text_encoder")
    diffusers.DDIMScheduler().save_pretrained(root / "scheduler")
    index = {
        "_class_name": "StableDiffusionAdapterPipeline",
        "_diffusers_version": "0.42.1",
        "adapter": ["diffusers", "T2IAdapter"],
        "text_encoder": ["transformers", "CLIPTextModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"],
        "scheduler": ["diffusers", "DDIMScheduler"],
        "safety_checker": [None, None],
        "requires_safety_checker": False,
    }
    (root / "model_index.json").write_text(json.dumps(index))
    return root


def _with_component(pipeline: Path, tmp_path: Path, name: str, value) -> Path:
    """A copy of ``pipeline`` (small files) with one more component in its index. Copied, not
    linked: a component folder linked out of the pipeline is refused (mobius.safe_paths)."""
    copy = tmp_path / "copy"
    copy.mkdir()
    for child in pipeline.iterdir():
        if child.is_dir():
            shutil.copytree(child, copy / child.name)
    index = json.loads((pipeline / "model_index.json").read_text())
    (copy / "model_index.json").write_text(json.dumps({**index, name: value}))
    return copy


def test_layout(pipeline, tmp_path):
    out = tmp_path / "out"
    assert main(["build", "--model", str(pipeline), str(out), "--quiet"]) == 0
    files = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert files == {
        "model_index.json", "mobius.json",
        "adapter/model.onnx", "adapter/model.onnx.data", "adapter/config.json",
        "text_encoder/model.onnx", "text_encoder/model.onnx.data", "text_encoder/config.json",
        "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json",
        "scheduler/scheduler_config.json",
    }  # fmt: skip
    assert (out / "model_index.json").read_bytes() == (pipeline / "model_index.json").read_bytes()


def test_components_of_the_index():
    index = {"_class_name": "X", "a": ["diffusers", "A"], "b": [None, None], "c": None, "d": True}
    assert pipeline_components(index) == {"a": ("diffusers", "A")}
    with pytest.raises(ConfigError, match="'a'"):
        pipeline_components({"a": ["diffusers"]})


def test_unrecognised_component_is_an_error_naming_it(pipeline, tmp_path):
    copy = _with_component(pipeline, tmp_path, "safety_checker", ["stable_diffusion", "X"])
    (copy / "safety_checker").mkdir()
    (copy / "safety_checker" / "config.json").write_text(json.dumps({"model_type": "nothing"}))
    with pytest.raises(ConfigError, match=r"component 'safety_checker' is a stable_diffusion\.X"):
        build_pipeline(copy, load_weights=False)
    # ... unless it is left out on purpose
    package = build_pipeline(copy, load_weights=False, skip=("safety_checker",))
    assert sorted(package.models) == ["adapter/model", "text_encoder/model"]
    with pytest.raises(ConfigError, match="no such component"):
        build_pipeline(copy, load_weights=False, skip=("unet",))


def test_missing_component_folder(pipeline, tmp_path):
    copy = _with_component(pipeline, tmp_path, "unet", ["diffusers", "UNet2DConditionModel"])
    with pytest.raises(ModelSourceError, match="component 'unet'"):
        build_pipeline(copy, load_weights=False)


def test_component_build_error_names_the_component(pipeline, tmp_path):
    copy = _with_component(pipeline, tmp_path, "vae", ["diffusers", "T2IAdapter"])
    (copy / "vae").mkdir()
    bad = {"_class_name": "T2IAdapter", **ADAPTER, "adapter_type": "light_adapter"}
    (copy / "vae" / "config.json").write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match="pipeline component 'vae': .*light_adapter"):
        build_pipeline(copy, load_weights=False)


def test_pipeline_download_fetches_component_folders(tmp_path, monkeypatch):
    """A hub id whose root has model_index.json and no config.json: the folders come next."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    (tmp_path / "model_index.json").write_text("{}")
    calls = []

    def fake(repo_id, **kwargs):
        calls.append(kwargs)
        return str(tmp_path)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    assert _resolve.resolve_model("org/pipeline") == tmp_path
    assert "model_index.json" in calls[0]["allow_patterns"]
    second = calls[1]
    for wanted in ("model_index.json", "*/*.json", "*/*.safetensors", "*/*.txt", "*/*.model"):
        assert wanted in second["allow_patterns"]
    assert "*/*.bin" not in second["allow_patterns"]
    from fnmatch import fnmatch

    ignored = second["ignore_patterns"]
    for variant in (
        "unet/diffusion_pytorch_model.fp16.safetensors",
        "text_encoder_2/model.fp16-00001-of-00002.safetensors",
        "text_encoder_2/model.safetensors.index.fp16.json",
    ):
        assert any(fnmatch(variant, p) for p in ignored), variant
    for default in (
        "unet/diffusion_pytorch_model.safetensors",
        "text_encoder_2/model-00001-of-00002.safetensors",
        "text_encoder_2/model.safetensors.index.json",
        "tokenizer/vocab.json",
    ):
        assert not any(fnmatch(default, p) for p in ignored), default


def test_runner_refusals(pipeline, tmp_path):
    from mobius_diffusion.pipeline import open_pipeline

    out = tmp_path / "out"
    assert main(["build", "--model", str(pipeline), str(out), "--quiet", "--no-weights"]) == 0
    index = json.loads((out / "model_index.json").read_text())
    # a pipeline class mobius does not run is refused, named
    unknown = {**index, "_class_name": "VQDiffusionPipeline"}
    (out / "model_index.json").write_text(json.dumps(unknown))
    with pytest.raises(ConfigError, match="VQDiffusionPipeline"):
        open_pipeline(out)
    (out / "model_index.json").write_text(json.dumps({**index, "_class_name": "FluxPipeline"}))
    config = {"_class_name": "LMSDiscreteScheduler"}
    (out / "scheduler" / "scheduler_config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="scheduler 'LMSDiscreteScheduler' is not ported"):
        open_pipeline(out)
