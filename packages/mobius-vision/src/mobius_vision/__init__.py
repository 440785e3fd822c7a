"""mobius-vision: vision encoders, image classification, zero-shot image–text and vision–language models.

Importing the package registers its architectures with ``mobius.registry``;
the ``mobius.plugins`` entry point does the same without an import. Each model
file in ``mobius_vision.models`` declares the HF ``model_type`` keys it builds in
a ``MODEL_TYPES`` table, next to the classes themselves.

:func:`generate_vl` runs a built vision–language package on a prompt and images
(``mobius generate PKG PROMPT --image FILE`` on the command line)::

    from mobius_vision import generate_vl

    text = generate_vl("llava-out/", "What is in this picture?", images=["cat.png"])

:func:`classify` (:mod:`mobius_vision.classifier`) classifies images with an image
classifier or a zero-shot (CLIP, SigLIP) package (``mobius classify`` on the command line).
"""

from __future__ import annotations

from mobius.discovery import discover_model_types, register_model_types, registrations

__version__ = "0.1.0"

PACKAGE = "mobius-vision"

# Model files that failed to import: file name -> error. Their types are not registered.
LOAD_ERRORS: dict[str, str] = {}


def model_types() -> dict[str, type]:
    """Every ``model_type`` this package builds, mapped to its module class."""
    from mobius_vision import models

    return discover_model_types(models, LOAD_ERRORS)


def register(registry) -> None:
    """Register mobius-vision's slice: its model types, and its tasks, sources, options and runners."""
    from mobius_vision.plugin import register_slice

    table = registrations("mobius_vision", model_types)  # the index: no model file imported
    register_model_types(registry, PACKAGE, table, LOAD_ERRORS, "mobius_vision:verified.json")
    register_slice(registry)


def __getattr__(name: str):
    # The runners' API, imported on first use: importing mobius_vision stays light.
    if name == "classify":
        from mobius_vision.classifier import classify

        return classify
    if name in ("generate_vl", "VisionLanguageGenerator"):  # mobius_vision.runner
        from mobius_vision import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'mobius_vision' has no attribute {name!r}")


def _register_default() -> None:
    from mobius import registry

    register(registry)


_register_default()
