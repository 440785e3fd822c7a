"""The registry of architectures, filled by domain packages through entry points.

A registration maps a key (an HF ``model_type`` or a diffusers ``_class_name``)
to a module class, its default task and its config class, and records which
package registered it. Domain packages declare ``register(registry)`` in the
``mobius.plugins`` entry-point group; the registry loads them on first lookup.

Verified keys (optional): a package may also call
``registry.declare_verified(package, "import.name:file.json")`` from its
``register``, naming a JSON file shipped inside it that lists the keys that
passed its parity suite (a list of keys, or an object whose ``"verified"``
member is that list). The file is read on the first :meth:`Registry.is_verified`
question about that package; a package that declares nothing answers ``None``.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.resources
import json
import logging
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from mobius.errors import UnknownModelTypeError

logger = logging.getLogger(__name__)

PLUGIN_GROUP = "mobius.plugins"

# Keys that belong to a domain whose package may not be installed: a user who
# asks for one is told what to install. Domain packages still own the truth.
DOMAIN_HINTS: dict[str, tuple[str, ...]] = {
    "mobius-text": (
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "smollm3",
        "gemma",
        "gemma2",
        "gemma3_text",
        "phi",
        "phi3",
        "mixtral",
        "falcon",
        "gpt2",
        "gpt_neox",
        "bert",
        "t5",
        "bart",
    ),
    "mobius-vision": ("vit", "clip", "siglip", "llava", "gemma3", "qwen2_vl", "mllama"),
    "mobius-audio": ("whisper", "wav2vec2", "hubert", "wavlm"),
    "mobius-diffusion": (
        "AutoencoderKL",
        "UNet2DConditionModel",
        "FluxTransformer2DModel",
        "SD3Transformer2DModel",
        "ControlNetModel",
    ),
}


def _load(target: Any) -> Any:
    """Resolve a lazy ``"module:attr"`` string; anything else is returned as is."""
    if not isinstance(target, str):
        return target
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


@dataclass(frozen=True)
class Registration:
    """One registered architecture."""

    key: str
    module: Any  # class or lazy "module:Class"
    task: str
    config: Any  # class, lazy "module:Class", or None for the module's ``config_class``
    package: str

    def module_class(self) -> type:
        return _load(self.module)

    def config_class(self) -> type:
        if self.config is None:
            return self.module_class().config_class
        return _load(self.config)


class Registry:
    """Keys to :class:`Registration`, with plugins discovered lazily."""

    def __init__(self, discover: bool = True) -> None:
        self._entries: dict[str, Registration] = {}
        self._discover = discover
        self._plugins_loaded = False
        self.plugin_errors: dict[str, str] = {}
        self.plugins: dict[str, str] = {}  # entry-point name -> distribution
        self._verified_sources: dict[str, str] = {}  # package -> "import.name:file.json"
        self._verified: dict[str, frozenset[str] | None] = {}  # package -> keys, once read

    def register(
        self, key: str, module: Any, *, task: str, package: str, config: Any = None
    ) -> Registration:
        """Add a key; registering the same key for the same package again is a no-op."""
        entry = Registration(key, module, task, config, package)
        existing = self._entries.get(key)
        if existing is not None and existing.package != package:
            raise ValueError(
                f"model type {key!r} is already registered by {existing.package}, not {package}"
            )
        self._entries[key] = entry
        return entry

    def declare_verified(self, package: str, resource: str) -> None:
        """Declare where ``package`` lists its verified keys; the list is read on first use.

        ``resource`` is ``"import.name:file.json"``, a file inside an importable
        package (see the module docstring for its content). Declaring again
        replaces the previous declaration.
        """
        if ":" not in resource:
            raise ValueError(f"verified-keys resource must be 'import.name:file', not {resource!r}")
        self._verified_sources[package] = resource
        self._verified.pop(package, None)

    def verified_keys(self, package: str) -> frozenset[str] | None:
        """The keys ``package`` lists as verified, or None when it declares no (readable) list."""
        self.load_plugins()
        if package not in self._verified:
            self._verified[package] = self._read_verified(package)
        return self._verified[package]

    def is_verified(self, key: str) -> bool | None:
        """Whether ``key`` passed its package's parity suite.

        ``None`` when that is not known: the key is not registered, or its package
        declares no verified list.
        """
        self.load_plugins()
        entry = self._entries.get(key)
        keys = self.verified_keys(entry.package) if entry is not None else None
        return None if keys is None else key in keys

    def _read_verified(self, package: str) -> frozenset[str] | None:
        resource = self._verified_sources.get(package)
        if resource is None:
            return None
        module, _, name = resource.partition(":")
        try:
            data = json.loads(importlib.resources.files(module).joinpath(name).read_text())
            keys = data["verified"] if isinstance(data, dict) else data
            if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
                raise ValueError("expected a list of keys")
        except Exception as exc:  # a broken list makes the status unknown, not the registry fail
            logger.warning("verified keys of %s (%s) unreadable: %s", package, resource, exc)
            return None
        return frozenset(keys)

    def load_plugins(self) -> None:
        """Call every installed plugin's ``register``; a failing plugin is recorded, not fatal."""
        if self._plugins_loaded or not self._discover:
            return
        self._plugins_loaded = True
        for ep in entry_points(group=PLUGIN_GROUP):
            dist = ep.dist.name if ep.dist is not None else ep.value
            try:
                ep.load()(self)
                self.plugins[ep.name] = dist
            except Exception as exc:  # one broken plugin must not hide the others
                self.plugin_errors[dist] = f"{type(exc).__name__}: {exc}"
                logger.warning("mobius plugin %s failed to load: %s", dist, exc)

    def __contains__(self, key: str) -> bool:
        self.load_plugins()
        return key in self._entries

    def keys(self) -> list[str]:
        self.load_plugins()
        return sorted(self._entries)

    def entries(self) -> list[Registration]:
        self.load_plugins()
        return [self._entries[k] for k in sorted(self._entries)]

    def by_package(self) -> dict[str, list[Registration]]:
        grouped: dict[str, list[Registration]] = {}
        for entry in self.entries():
            grouped.setdefault(entry.package, []).append(entry)
        return grouped

    def get(self, key: str) -> Registration:
        """The registration of ``key``, or :class:`UnknownModelTypeError` explaining what to do."""
        self.load_plugins()
        try:
            return self._entries[key]
        except KeyError:
            raise UnknownModelTypeError(self._unknown_message(key)) from None

    def _unknown_message(self, key: str) -> str:
        parts = [f"unknown model type {key!r}"]
        close = difflib.get_close_matches(key, list(self._entries), n=3, cutoff=0.6)
        if close:
            parts.append("close matches: " + ", ".join(close))
        installed = sorted(set(self.plugins.values()) | {e.package for e in self._entries.values()})
        parts.append("installed: " + (", ".join(installed) if installed else "no domain packages"))
        for package, keys in DOMAIN_HINTS.items():
            if key in keys and package not in installed:
                parts.append(f"install {package} (pip install {package})")
        if self.plugin_errors:
            failed = ", ".join(f"{d} ({e})" for d, e in self.plugin_errors.items())
            parts.append("plugins that failed to load: " + failed)
        return "; ".join(parts)


registry = Registry()
