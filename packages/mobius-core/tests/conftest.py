"""Shared fixtures of mobius-core's tests: a tiny Llama checkpoint written by hand (no torch)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from huggingface_hub import constants

from mobius_text.testing import tiny_llama_tensors, write_tiny_llama


@pytest.fixture
def tiny_llama_arrays() -> dict[str, np.ndarray]:
    """The tiny Llama's seeded float32 weights under their HF names (a fresh dict per test)."""
    return tiny_llama_tensors()


@pytest.fixture
def make_tiny_llama(tmp_path: Path) -> Callable[..., Path]:
    """A factory: ``make_tiny_llama(name="tiny-llama", tensors=None, **config_overrides)``."""

    def make(name: str = "tiny-llama", tensors=None, **config: Any) -> Path:
        return write_tiny_llama(tmp_path / name, tensors, **config)

    return make


@pytest.fixture
def tiny_llama_dir(make_tiny_llama) -> Path:
    """A complete tiny float32 Llama checkpoint directory."""
    return make_tiny_llama()


@pytest.fixture(autouse=True)
def _offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may reach the hub: offline mode and an empty cache."""
    home = tmp_path / "hf_home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
