"""How a domain package finds its model files and registers them (mobius-text, mobius-vision...).

Each model file in a package's ``models`` subpackage declares the HF keys it
builds in a ``MODEL_TYPES`` table, next to the classes; a class's ``task``
attribute names its graphs' contract.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from types import ModuleType

logger = logging.getLogger(__name__)


def discover_model_types(models: ModuleType, load_errors: dict[str, str]) -> dict[str, type]:
    """Every key the model files of ``models`` declare, mapped to its module class.

    A model file that fails to import is recorded in ``load_errors`` (file name ->
    error) without hiding the other families; a key declared twice is an error.
    """
    table: dict[str, type] = {}
    for info in sorted(pkgutil.iter_modules(models.__path__), key=lambda m: m.name):
        try:
            module = importlib.import_module(f"{models.__name__}.{info.name}")
        except Exception as exc:
            load_errors[info.name] = f"{type(exc).__name__}: {exc}"
            logger.warning("model file %s.%s failed to import: %s", models.__name__, info.name, exc)
            continue
        for key, cls in getattr(module, "MODEL_TYPES", {}).items():
            if key in table:
                raise ValueError(f"model_type {key!r} is declared twice (again in {info.name})")
            table[key] = cls
    return table


def register_model_types(
    registry,
    package: str,
    table: dict[str, type],
    load_errors: dict[str, str],
    verified_resource: str | None = None,
) -> None:
    """Register ``table`` for ``package``, its verified list and its model files' import errors."""
    for key, module in table.items():
        registry.register(key, module, task=getattr(module, "task", "causal-lm"), package=package)
    # verified.json is written by the package's scripts/support_table.py from a parity run.
    if verified_resource and hasattr(registry, "declare_verified"):
        registry.declare_verified(package, verified_resource)
    for name, error in load_errors.items():
        registry.plugin_errors[f"{package} (models/{name}.py)"] = error
