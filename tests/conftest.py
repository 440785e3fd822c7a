"""Fixtures shared by the root tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct as a float32 safetensors folder (made once per session, ~30 s)."""
    from mobius_text.testing import write_smollm2_checkpoint

    return write_smollm2_checkpoint(tmp_path_factory.mktemp("smollm2") / "hf")
