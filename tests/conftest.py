"""Fixtures shared by the root tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from huggingface_hub import constants

from mobius_text.testing import write_tiny_llama


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct as a float32 safetensors folder (made once per session, ~30 s)."""
    from mobius_text.testing import write_smollm2_checkpoint

    return write_smollm2_checkpoint(tmp_path_factory.mktemp("smollm2") / "hf")


@pytest.fixture
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub offline, with an empty cache of the test's own: nothing is fetched,
    and a model id can only be a local path."""
    home = tmp_path / "hf_home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A tiny random Llama checkpoint folder (``write_tiny_llama``)."""
    return write_tiny_llama(tmp_path / "model")


@pytest.fixture
def outputs(tmp_path: Path) -> Path:
    """The parent of every output directory: empty, so leftovers are easy to see."""
    path = tmp_path / "outputs"
    path.mkdir()
    return path
