"""mobius-text: decoder-only LLMs, MoE and state-space models, encoders and encoder-decoders.

Importing the package registers its architectures with ``mobius.registry``;
the ``mobius.plugins`` entry point does the same without an import. Each model
file in ``mobius_text.models`` declares the HF ``model_type`` keys it builds in
a ``MODEL_TYPES`` table, next to the classes themselves.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil

__version__ = "0.1.0"

PACKAGE = "mobius-text"


logger = logging.getLogger(__name__)

# Model files that failed to import: file name -> error. Their types are not registered.
LOAD_ERRORS: dict[str, str] = {}


def model_types() -> dict[str, type]:
    """Every ``model_type`` this package builds, mapped to its module class.

    A model file that fails to import is recorded in ``LOAD_ERRORS`` (and reported
    by the registry) without hiding the other families.
    """
    from mobius_text import models

    table: dict[str, type] = {}
    for info in sorted(pkgutil.iter_modules(models.__path__), key=lambda m: m.name):
        try:
            module = importlib.import_module(f"{models.__name__}.{info.name}")
        except Exception as exc:
            LOAD_ERRORS[info.name] = f"{type(exc).__name__}: {exc}"
            logger.warning("mobius-text model file %s failed to import: %s", info.name, exc)
            continue
        for key, cls in getattr(module, "MODEL_TYPES", {}).items():
            if key in table:
                raise ValueError(f"model_type {key!r} is declared twice (again in {info.name})")
            table[key] = cls
    return table


def register(registry) -> None:
    """Add mobius-text's architectures to ``registry``; calling it again changes nothing."""
    for model_type, module in model_types().items():
        task = getattr(module, "task", "causal-lm")  # encoders declare "feature-extraction"
        registry.register(model_type, module, task=task, package=PACKAGE)
    # verified.json is written by scripts/support_table.py from a parity run. An older
    # mobius-core without the verified notion simply does not ask.
    if hasattr(registry, "declare_verified"):
        registry.declare_verified(PACKAGE, "mobius_text:verified.json")
    for name, error in LOAD_ERRORS.items():
        registry.plugin_errors[f"{PACKAGE} (models/{name}.py)"] = error


def _register_default() -> None:
    from mobius import registry

    register(registry)


_register_default()
