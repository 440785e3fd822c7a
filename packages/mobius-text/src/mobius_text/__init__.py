"""mobius-text: decoder-only LLMs, MoE and state-space models, encoders and encoder-decoders.

Importing the package registers its architectures with ``mobius.registry``;
the ``mobius.plugins`` entry point does the same without an import. Each model
file in ``mobius_text.models`` declares the HF ``model_type`` keys it builds in
a ``MODEL_TYPES`` table, next to the classes themselves.
"""

from __future__ import annotations

from mobius.discovery import discover_model_types, register_model_types, registrations

__version__ = "0.1.0"

PACKAGE = "mobius-text"

# Model files that failed to import: file name -> error. Their types are not registered.
LOAD_ERRORS: dict[str, str] = {}


def model_types() -> dict[str, type]:
    """Every ``model_type`` this package builds, mapped to its module class."""
    from mobius_text import models

    return discover_model_types(models, LOAD_ERRORS)


def register(registry) -> None:
    """Register mobius-text's slice: its model types, and its tasks, sources, options and runners."""
    from mobius_text.plugin import register_slice

    table = registrations("mobius_text", model_types)  # the index: no model file imported
    register_model_types(registry, PACKAGE, table, LOAD_ERRORS, "mobius_text:verified.json")
    register_slice(registry)


def _register_default() -> None:
    from mobius import registry

    register(registry)


_register_default()
