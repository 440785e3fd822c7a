"""What ``mobius generate`` does with a vision–language package: refuse it, saying how to run it.

The text runners of core cannot feed ``pixel_values``; until mobius-vision has a
runner of its own, a vision–language package is recognised here so the user gets
this answer instead of a contract error about unknown graph inputs.
"""

from __future__ import annotations

import os
from pathlib import Path

from mobius.errors import MobiusError


def is_vision_language_package(package_dir: str | os.PathLike) -> bool:
    """Whether the package is a split (``vision/``) or single-graph (``pixel_values``) VL build."""
    package = Path(package_dir)
    if (package / "vision" / "model.onnx").is_file():
        return True
    graph = package / "model.onnx"
    if not graph.is_file():
        return False
    import onnx

    model = onnx.load(str(graph), load_external_data=False)
    return any(i.name.startswith("pixel_values") for i in model.graph.input)


def run_cli(package_dir: str | os.PathLike, prompt: str, options: dict) -> int:
    """Refuse: name the runtimes that run the package."""
    raise MobiusError(
        f"{package_dir} is a vision–language package: mobius generate runs text, "
        "encoder–decoder and speech packages only (run its vision/, embedding/ and decoder/ "
        "graphs in ONNX Runtime, or a genai_config.json package in onnxruntime-genai)"
    )
