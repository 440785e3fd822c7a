"""mobius: construct ONNX models for generative-AI architectures.

Graphs are built with the ``onnxscript.nn`` API from a declarative description
of each architecture, then filled with HuggingFace weights. Domain packages
(``mobius-text``, ``mobius-vision``, ...) register their architectures through
the ``mobius.plugins`` entry point.
"""

__version__ = "0.1.0"

from mobius._build import build, build_from_module
from mobius._config import ArchitectureConfig, RopeConfig
from mobius._package import ModelPackage
from mobius._registry import Registration, Registry, registry
from mobius.errors import MobiusError
from mobius.generate import TextGenerator, generate_text  # onnxruntime loads on use
from mobius.weights import apply_weights

__all__ = [
    "ArchitectureConfig",
    "MobiusError",
    "ModelPackage",
    "Registration",
    "Registry",
    "RopeConfig",
    "TextGenerator",
    "__version__",
    "apply_weights",
    "build",
    "build_from_module",
    "generate_text",
    "registry",
]
