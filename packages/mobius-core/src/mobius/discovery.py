"""How a domain package finds its model files and registers them (mobius-text, mobius-vision...).

Each model file in a package's ``models`` subpackage declares the HF keys it
builds in a ``MODEL_TYPES`` table, next to the classes; a class's ``task``
attribute names its graphs' contract.

Importing every model file costs seconds, so registration reads an index
instead: ``registrations.json`` inside the package maps each key to its lazy
``"module:Class"`` and task, and the class is imported only when a build asks
for it. The index is written from the model files themselves
(``python -m mobius.discovery mobius_text``); a test compares it with them, so a
model file added without rewriting the index fails the suite, never a user.
"""

from __future__ import annotations

import importlib
import importlib.resources
import json
import logging
import pkgutil
import sys
from pathlib import Path
from types import ModuleType

logger = logging.getLogger(__name__)

INDEX = "registrations.json"


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


def index_of(table: dict[str, type]) -> dict[str, dict[str, str]]:
    """The index entries of a discovered table: key -> lazy class and task."""
    return {
        key: {
            "module": f"{cls.__module__}:{cls.__qualname__}",
            "task": getattr(cls, "task", "causal-lm"),
        }
        for key, cls in sorted(table.items())
    }


def read_index(package: str) -> dict[str, dict[str, str]] | None:
    """The ``registrations.json`` of an importable package, or None when it has none."""
    try:
        text = importlib.resources.files(package).joinpath(INDEX).read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError):
        return None
    return json.loads(text)


def register_model_types(
    registry,
    package: str,
    table: dict[str, type] | dict[str, dict[str, str]],
    load_errors: dict[str, str],
    verified_resource: str | None = None,
) -> None:
    """Register ``table`` for ``package``, its verified list and its model files' import errors.

    ``table`` maps keys to classes (discovered) or to index entries (lazy).
    """
    for key, target in table.items():
        if isinstance(target, dict):
            registry.register(key, target["module"], task=target["task"], package=package)
        else:
            registry.register(
                key, target, task=getattr(target, "task", "causal-lm"), package=package
            )
    # verified.json is written by the package's scripts/support_table.py from a parity run.
    if verified_resource and hasattr(registry, "declare_verified"):
        registry.declare_verified(package, verified_resource)
    for name, error in load_errors.items():
        registry.plugin_errors[f"{package} (models/{name}.py)"] = error


def registrations(import_name: str, discover) -> dict[str, type] | dict[str, dict[str, str]]:
    """A package's registrations: its index when it ships one, else ``discover()`` (slow)."""
    index = read_index(import_name)
    return index if index is not None else discover()


def write_index(import_name: str) -> Path:
    """Write ``registrations.json`` of a domain package from its model files; returns its path."""
    package = importlib.import_module(import_name)
    errors: dict[str, str] = {}
    table = discover_model_types(importlib.import_module(f"{import_name}.models"), errors)
    if errors:
        raise SystemExit(f"model files fail to import: {errors}")
    path = Path(package.__file__).parent / INDEX
    path.write_text(json.dumps(index_of(table), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


if __name__ == "__main__":  # python -m mobius.discovery mobius_text [mobius_vision ...]
    for name in sys.argv[1:] or [
        "mobius_text",
        "mobius_vision",
        "mobius_audio",
        "mobius_diffusion",
    ]:
        print(f"wrote {write_index(name)}")
