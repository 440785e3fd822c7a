"""Packaging: the wheels build, install without the workspace or torch, and work.

A user who runs ``pip install mobius-text`` gets mobius-core and its runtime
dependencies from the index, and no torch. These tests build the real wheels
with ``uv build``, install two of them into a fresh virtual environment, and
build a tiny Llama with the installed ``mobius`` command.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from mobius_text.testing import TINY_LLAMA_CONFIG, write_tiny_llama

ROOT = Path(__file__).resolve().parents[1]

# distribution -> import package (where hatch reads ``__version__``)
PACKAGES = {
    "mobius-core": "mobius",
    "mobius-text": "mobius_text",
    "mobius-vision": "mobius_vision",
    "mobius-audio": "mobius_audio",
    "mobius-diffusion": "mobius_diffusion",
}

TINY_LLAMA = TINY_LLAMA_CONFIG


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("`uv` is not on PATH: the packaging tests need it (.ci/run installs it)")
    return uv


def _run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 600):
    """Run a command; on failure, fail the test with its output."""
    result = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, env=env, timeout=timeout
    )
    if result.returncode != 0:
        pytest.fail(
            f"command failed ({result.returncode}): {' '.join(map(str, cmd))}\n"
            f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
        )
    return result


def _build_wheel(dist: str, out: Path) -> Path:
    _run([_uv(), "build", "--package", dist, "--wheel", "-o", out], timeout=300)
    name = dist.replace("-", "_")
    wheels = sorted(out.glob(f"{name}-*.whl"))
    assert len(wheels) == 1, f"expected one wheel of {dist} in {out}, found {wheels}"
    return wheels[0]


def _source_version(dist: str) -> str:
    init = ROOT / "packages" / dist / "src" / PACKAGES[dist] / "__init__.py"
    match = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', init.read_text(), re.M)
    assert match, f"no __version__ in {init}"
    return match.group(1)


SEQ2SEQ_LAYOUT = ["encoder/model.onnx", "decoder/model.onnx", "config.json"]


def _save_tiny(model_type: str, directory: Path) -> None:
    """A tiny random ``bert`` (encoder) or ``bart`` (encoder-decoder) checkpoint, saved here."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

    sizes = {
        "bert": dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                     num_attention_heads=4),
        "bart": dict(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37),
    }[model_type]  # fmt: skip
    config = AutoConfig.for_model(model_type, vocab_size=99, max_position_embeddings=64, **sizes)
    torch.manual_seed(0)
    auto = AutoModelForSeq2SeqLM if model_type == "bart" else AutoModel
    auto.from_config(config).save_pretrained(directory)


@pytest.mark.slow
def test_core_and_text_wheels_install_without_torch_and_build_a_model(tmp_path: Path) -> None:
    uv = _uv()
    dist = tmp_path / "dist"
    wheels = [_build_wheel(d, dist) for d in ("mobius-core", "mobius-text")]

    # A fresh environment: no workspace, no dev group, only the two wheels and
    # what they declare (resolved from the package index).
    venv = tmp_path / "venv"
    _run([uv, "venv", venv, "--python", sys.executable])
    python = venv / "bin" / "python"
    _run([uv, "pip", "install", "--python", python, *wheels], timeout=600)

    no_torch = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True)
    assert no_torch.returncode != 0, "torch got installed: it must stay a test-only dependency"
    assert "ModuleNotFoundError" in no_torch.stderr, no_torch.stderr

    model_dir = tmp_path / "tiny-llama"
    write_tiny_llama(model_dir)

    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env |= {"HF_HUB_OFFLINE": "1", "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"}
    mobius = venv / "bin" / "mobius"
    out = tmp_path / "out"
    _run([mobius, "build", "--model", model_dir, out, "--quiet"], env=env)
    assert (out / "model.onnx").is_file()
    assert (out / "model.onnx.data").is_file()

    # An encoder and an encoder-decoder need nothing more than the two wheels either.
    for model_type, layout in (("bert", ["model.onnx"]), ("bart", SEQ2SEQ_LAYOUT)):
        source = tmp_path / f"tiny-{model_type}"
        _save_tiny(model_type, source)
        built = tmp_path / f"out-{model_type}"
        _run([mobius, "build", "--model", source, built, "--quiet"], env=env)
        for name in layout:
            assert (built / name).is_file(), f"{model_type}: no {name}"

    listing = _run([mobius, "list"], env=env).stdout
    assert "mobius-text" in listing, listing
    assert re.search(r"^\s+llama\s", listing, re.M), listing

    help_text = _run([python, "-m", "mobius", "--help"], env=env).stdout
    assert "build" in help_text and "list" in help_text, help_text

    # One forward step in ONNX Runtime (the test process), empty KV cache.
    import onnxruntime as ort

    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    batch, seq = 1, 5
    head_dim = TINY_LLAMA["hidden_size"] // TINY_LLAMA["num_attention_heads"]
    feeds = {
        "input_ids": np.array([[1, 7, 13, 42, 63]], dtype=np.int64),
        "attention_mask": np.ones((batch, seq), dtype=np.int64),
        "position_ids": np.arange(seq, dtype=np.int64)[None, :],
    }
    empty = np.zeros((batch, TINY_LLAMA["num_key_value_heads"], 0, head_dim), dtype=np.float32)
    for i in range(TINY_LLAMA["num_hidden_layers"]):
        feeds[f"past_key_values.{i}.key"] = empty
        feeds[f"past_key_values.{i}.value"] = empty
    assert {i.name for i in session.get_inputs()} == set(feeds)
    logits = session.run(["logits"], feeds)[0]
    assert logits.shape == (batch, seq, TINY_LLAMA["vocab_size"])
    assert np.isfinite(logits).all()


@pytest.mark.slow
def test_every_package_builds_a_wheel_with_its_version_and_plugin_entry_point(
    tmp_path: Path,
) -> None:
    for dist in PACKAGES:
        wheel = _build_wheel(dist, tmp_path / dist)
        version = _source_version(dist)
        name = dist.replace("-", "_")
        assert wheel.name.startswith(f"{name}-{version}-"), wheel.name
        with zipfile.ZipFile(wheel) as zf:
            info = f"{name}-{version}.dist-info"
            metadata = zf.read(f"{info}/METADATA").decode()
            entry_points = zf.read(f"{info}/entry_points.txt").decode()
        assert re.search(rf"^Name: {re.escape(dist)}$", metadata, re.M), metadata
        assert re.search(rf"^Version: {re.escape(version)}$", metadata, re.M), metadata
        if dist == "mobius-core":
            # Core owns the registry and the CLI; the domain packages are its plugins.
            assert re.search(r"^mobius\s*=\s*mobius\.__main__:main", entry_points, re.M), (
                entry_points
            )
            # `pip install mobius-core[run]` can chat: chat templates render with jinja2.
            for needed in ("onnxruntime", "jinja2"):
                pattern = rf"^Requires-Dist: {needed}\b.*extra == ['\"]run['\"]"
                assert re.search(pattern, metadata, re.M), metadata
        else:
            assert "[mobius.plugins]" in entry_points, f"{dist}: {entry_points}"


@pytest.mark.slow
def test_diffusion_wheel_builds_a_component_without_torch_or_diffusers(tmp_path: Path) -> None:
    """mobius-diffusion reads a component's own config.json: neither diffusers nor torch is needed."""
    import diffusers
    import torch

    uv = _uv()
    dist = tmp_path / "dist"
    wheels = [_build_wheel(d, dist) for d in ("mobius-core", "mobius-diffusion")]
    venv = tmp_path / "venv"
    _run([uv, "venv", venv, "--python", sys.executable])
    python = venv / "bin" / "python"
    _run([uv, "pip", "install", "--python", python, *wheels], timeout=600)
    for module in ("torch", "diffusers"):
        missing = subprocess.run([python, "-c", f"import {module}"], capture_output=True)
        assert missing.returncode != 0, f"{module} got installed with mobius-diffusion"

    torch.manual_seed(0)
    source = tmp_path / "t2i-adapter"
    diffusers.T2IAdapter(channels=[8, 16], num_res_blocks=1, downscale_factor=2).save_pretrained(
        source
    )
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env |= {"HF_HUB_OFFLINE": "1", "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"}
    out = tmp_path / "out"
    _run([venv / "bin" / "mobius", "build", "--model", source, out, "--quiet"], env=env)
    assert (out / "model.onnx").is_file() and (out / "config.json").is_file()
    listing = _run([venv / "bin" / "mobius", "list"], env=env).stdout
    assert "mobius-diffusion" in listing and "T2IAdapter" in listing, listing
