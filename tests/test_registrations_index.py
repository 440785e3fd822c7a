"""Each domain package's ``registrations.json`` matches its model files.

Registration reads the index so that ``mobius list`` and ``--help`` import no
model file; the model files (their ``MODEL_TYPES`` tables) stay the truth. A
model file added, renamed or retasked without rewriting the index fails here:
run ``uv run python -m mobius.discovery`` to rewrite every index.
"""

from __future__ import annotations

import importlib

import pytest

from mobius.discovery import discover_model_types, index_of, read_index


@pytest.mark.parametrize(
    "package", ["mobius_text", "mobius_vision", "mobius_audio", "mobius_diffusion"]
)
def test_index_matches_the_model_files(package):
    errors: dict[str, str] = {}
    table = discover_model_types(importlib.import_module(f"{package}.models"), errors)
    assert errors == {}
    assert read_index(package) == index_of(table), (
        f"{package}/registrations.json is stale: run `uv run python -m mobius.discovery {package}`"
    )


def test_registered_entries_resolve_lazily():
    """An indexed key is registered as a lazy "module:Class" string, and loads on use."""
    import mobius_audio
    from mobius import Registry

    registry = Registry(discover=False)
    mobius_audio.register(registry)
    entry = registry.get("whisper")
    assert isinstance(entry.module, str) and entry.module.startswith("mobius_audio.models.")
    assert entry.module_class().__module__ == entry.module.partition(":")[0]


def test_every_registered_class_is_a_mobius_model():
    """Core calls only the hooks mobius.Model declares: every registered class must subclass it."""
    from mobius.model import Model
    from mobius.plugins import load

    offenders = []
    for package in ("mobius_text", "mobius_vision", "mobius_audio", "mobius_diffusion"):
        for key, entry in read_index(package).items():
            if not issubclass(load(entry["module"]), Model):
                offenders.append(f"{package}: {key} ({entry['module']})")
    assert offenders == []
