"""mobius: construct ONNX models for generative-AI architectures.

Graphs are built with the ``onnxscript.nn`` API from a declarative description
of each architecture, then filled with HuggingFace weights. Domain packages
(``mobius-text``, ``mobius-vision``, ...) register their architectures through
the ``mobius.plugins`` entry point.

The names below are imported on first use, so ``import mobius`` (and the
``mobius`` command's ``--help``) costs nothing heavy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "ArchitectureConfig": "mobius.config",
    "BuildOptions": "mobius.options",
    "MobiusError": "mobius.errors",
    "ModelPackage": "mobius._package",
    "QuantOptions": "mobius.options",
    "Registration": "mobius._registry",
    "Registry": "mobius._registry",
    "RopeConfig": "mobius.config",
    "TextGenerator": "mobius.generate",
    "apply_weights": "mobius.weights",
    "build": "mobius._build",
    "build_from_module": "mobius._build",
    "embed": "mobius.embedding",
    "generate_text": "mobius.generate",
    "registry": "mobius._registry",
    "validate_package": "mobius.validate",
    "ValidationReport": "mobius.validate",
}

__all__ = [
    "ArchitectureConfig",
    "BuildOptions",
    "MobiusError",
    "ModelPackage",
    "QuantOptions",
    "Registration",
    "Registry",
    "RopeConfig",
    "TextGenerator",
    "__version__",
    "apply_weights",
    "build",
    "build_from_module",
    "embed",
    "generate_text",
    "registry",
    "validate_package",
    "ValidationReport",
]

if TYPE_CHECKING:
    from mobius._build import build, build_from_module
    from mobius._package import ModelPackage
    from mobius._registry import Registration, Registry, registry
    from mobius.config import ArchitectureConfig, RopeConfig
    from mobius.embedding import embed
    from mobius.errors import MobiusError
    from mobius.generate import TextGenerator, generate_text
    from mobius.options import BuildOptions, QuantOptions
    from mobius.validate import ValidationReport, validate_package
    from mobius.weights import apply_weights


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mobius' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value
