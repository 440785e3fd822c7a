"""The registry: registration, lazy classes, plugin discovery and the unknown-key message."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import mobius
import mobius._registry as registry_module
from mobius import Registration, Registry
from mobius.errors import MobiusError, UnknownModelTypeError

TEXT_KEYS = ["llama", "mistral", "qwen2", "qwen3", "smollm3"]


class FakeEntryPoint:
    """What ``Registry.load_plugins`` reads from an ``importlib.metadata.EntryPoint``."""

    def __init__(self, name: str, dist: str | None, register) -> None:
        self.name = name
        self.value = f"fake_{name}:register"
        self.dist = SimpleNamespace(name=dist) if dist is not None else None
        self._register = register

    def load(self):
        return self._register


def fake_entry_points(monkeypatch: pytest.MonkeyPatch, *eps: FakeEntryPoint) -> list[str]:
    """Make the registry see exactly ``eps`` in the ``mobius.plugins`` group; return the groups asked."""
    asked: list[str] = []

    def entry_points(*, group: str):
        asked.append(group)
        return list(eps) if group == registry_module.PLUGIN_GROUP else []

    monkeypatch.setattr(registry_module, "entry_points", entry_points)
    return asked


def text_register(registry: Registry) -> None:
    import mobius_text

    mobius_text.register(registry)


def add_dummy(registry: Registry, key: str = "dummy", package: str = "pkg-a") -> Registration:
    return registry.register(
        key,
        "collections:OrderedDict",
        task="causal-lm",
        config="collections:Counter",
        package=package,
    )


# -- registration -------------------------------------------------------------------------


def test_register_and_get() -> None:
    reg = Registry(discover=False)
    entry = add_dummy(reg)
    assert isinstance(entry, Registration)
    got = reg.get("dummy")
    assert got == entry
    assert (got.key, got.task, got.package) == ("dummy", "causal-lm", "pkg-a")
    assert "dummy" in reg
    assert "other" not in reg
    assert reg.keys() == ["dummy"]
    assert reg.by_package() == {"pkg-a": [entry]}


def test_register_twice_same_package_is_harmless() -> None:
    reg = Registry(discover=False)
    first = add_dummy(reg)
    second = add_dummy(reg)
    assert first == second
    assert reg.keys() == ["dummy"]
    assert reg.entries() == [first]


def test_register_conflicting_package_raises() -> None:
    reg = Registry(discover=False)
    add_dummy(reg, package="pkg-a")
    with pytest.raises(ValueError, match=r"'dummy'.*already registered by pkg-a.*pkg-b"):
        add_dummy(reg, package="pkg-b")
    assert reg.get("dummy").package == "pkg-a"


def test_lazy_strings_resolve() -> None:
    from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM

    reg = Registry(discover=False)
    entry = reg.register(
        "llama",
        "mobius_text.models.llama:LlamaForCausalLM",
        task="causal-lm",
        config="mobius_text.models.llama:LlamaConfig",
        package="mobius-text",
    )
    assert entry.module == "mobius_text.models.llama:LlamaForCausalLM"  # stored as given
    assert entry.module_class() is LlamaForCausalLM
    assert entry.config_class() is LlamaConfig


def test_classes_given_directly_are_returned_as_is() -> None:
    from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM

    reg = Registry(discover=False)
    entry = reg.register(
        "llama", LlamaForCausalLM, task="causal-lm", config=LlamaConfig, package="mobius-text"
    )
    assert entry.module_class() is LlamaForCausalLM
    assert entry.config_class() is LlamaConfig


def test_config_defaults_to_the_module_class_config_class() -> None:
    from mobius_text.models.llama import LlamaConfig, LlamaForCausalLM

    reg = Registry(discover=False)
    entry = reg.register(
        "llama",
        "mobius_text.models.llama:LlamaForCausalLM",
        task="causal-lm",
        package="mobius-text",
    )
    assert entry.config is None
    assert entry.module_class() is LlamaForCausalLM
    assert entry.config_class() is LlamaConfig


def test_text_package_registers_its_keys() -> None:
    import mobius_text

    reg = Registry(discover=False)
    mobius_text.register(reg)
    assert set(TEXT_KEYS) <= set(reg.keys())
    for entry in reg.entries():
        assert entry.package == "mobius-text"
        assert entry.task == getattr(entry.module_class(), "task", "causal-lm")
        assert isinstance(entry.module_class(), type)
        assert isinstance(entry.config_class(), type)
    assert reg.get("llama").task == "causal-lm"
    assert reg.get("bert").task == "feature-extraction"


# -- unknown keys -------------------------------------------------------------------------


def test_unknown_key_error() -> None:
    reg = Registry(discover=False)
    text_register(reg)
    with pytest.raises(UnknownModelTypeError) as info:
        reg.get("lama")
    error = info.value
    assert isinstance(error, MobiusError)
    assert isinstance(error, KeyError)  # callers catching KeyError keep working
    message = str(error)
    assert "\n" not in message
    assert message.startswith("unknown model type 'lama'")  # not KeyError's quoted repr
    assert "close matches: llama" in message


def test_unknown_key_lists_several_close_matches() -> None:
    reg = Registry(discover=False)
    text_register(reg)
    message = str(pytest.raises(UnknownModelTypeError, reg.get, "qwen").value)
    assert "qwen2" in message and "qwen3" in message


def test_unknown_key_without_close_match_names_none() -> None:
    reg = Registry(discover=False)
    text_register(reg)
    message = str(pytest.raises(UnknownModelTypeError, reg.get, "zzzzzz").value)
    assert "'zzzzzz'" in message
    assert "close matches" not in message


def test_unknown_key_names_installed_and_the_packages_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only mobius-text is installed: the key may belong to another domain, so name them.

    Core knows the domain packages, not which families they hold: it lists those
    that are not installed, each with its install command, and not mobius-text.
    """
    fake_entry_points(monkeypatch, FakeEntryPoint("text", "mobius-text", text_register))
    reg = Registry()
    message = str(pytest.raises(UnknownModelTypeError, reg.get, "whisper").value)
    assert "unknown model type 'whisper'" in message
    assert "installed: mobius-text" in message
    for other in ("mobius-vision", "mobius-audio", "mobius-diffusion"):
        assert f"{other} (pip install {other})" in message
    assert "pip install mobius-text" not in message
    assert reg.get("llama").package == "mobius-text"  # the plugin did load


def test_no_install_hint_when_every_domain_is_installed() -> None:
    reg = Registry(discover=False)
    for package in registry_module.DOMAIN_PACKAGES:
        reg.register(f"key-of-{package}", object, task="causal-lm", package=package)
    message = str(pytest.raises(UnknownModelTypeError, reg.get, "future_model").value)
    assert "pip install" not in message


def test_unknown_key_with_no_domain_package(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch)
    reg = Registry()
    message = str(pytest.raises(UnknownModelTypeError, reg.get, "llama").value)
    assert "installed: no domain packages" in message
    assert "install it: mobius-text (pip install mobius-text)" in message


def test_installed_counts_packages_registered_without_an_entry_point() -> None:
    """A package that registered by import (no entry point) counts as installed all the same."""
    reg = Registry(discover=False)
    text_register(reg)
    message = str(pytest.raises(UnknownModelTypeError, reg.get, "future_text_model").value)
    assert "installed: mobius-text" in message
    assert "pip install mobius-text" not in message


# -- plugins ------------------------------------------------------------------------------


def test_plugins_load_lazily_on_first_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def register(reg: Registry) -> None:
        calls.append(reg)
        add_dummy(reg, package="pkg-a")

    asked = fake_entry_points(monkeypatch, FakeEntryPoint("a", "pkg-a", register))
    reg = Registry()
    assert calls == []  # nothing at construction
    assert reg.get("dummy").package == "pkg-a"
    assert calls == [reg]
    assert asked == [registry_module.PLUGIN_GROUP]
    assert reg.plugins == {"a": "pkg-a"}
    # Later lookups do not load the plugins again.
    assert "dummy" in reg
    reg.keys()
    assert calls == [reg]


def test_discover_false_loads_no_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    def register(reg: Registry) -> None:
        raise AssertionError("must not be called")

    fake_entry_points(monkeypatch, FakeEntryPoint("a", "pkg-a", register))
    reg = Registry(discover=False)
    reg.load_plugins()
    assert reg.keys() == []
    assert reg.plugins == {}
    assert reg.plugin_errors == {}


def test_failing_plugin_is_recorded_and_does_not_stop_others(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(reg: Registry) -> None:
        raise RuntimeError("boom")

    def good(reg: Registry) -> None:
        add_dummy(reg, "good-key", package="pkg-good")

    fake_entry_points(
        monkeypatch,
        FakeEntryPoint("first", "pkg-first", text_register),
        FakeEntryPoint("broken", "pkg-broken", broken),
        FakeEntryPoint("good", "pkg-good", good),
    )
    reg = Registry()
    with caplog.at_level("WARNING", logger="mobius._registry"):
        reg.load_plugins()
    assert reg.plugin_errors == {"pkg-broken": "RuntimeError: boom"}
    assert reg.plugins == {"first": "pkg-first", "good": "pkg-good"}
    assert "good-key" in reg and "llama" in reg
    assert any("pkg-broken" in r.getMessage() and "boom" in r.getMessage() for r in caplog.records)
    # The failure is part of the unknown-key message.
    message = str(pytest.raises(UnknownModelTypeError, reg.get, "nope").value)
    assert "plugins that failed to load: pkg-broken (RuntimeError: boom)" in message
    assert "\n" not in message


def test_plugin_that_fails_to_import_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    class Unimportable(FakeEntryPoint):
        def load(self):
            raise ModuleNotFoundError("No module named 'fake_missing'")

    fake_entry_points(
        monkeypatch,
        Unimportable("missing", "pkg-missing", None),
        FakeEntryPoint("text", "mobius-text", text_register),
    )
    reg = Registry()
    assert set(TEXT_KEYS) <= set(reg.keys())
    assert "ModuleNotFoundError" in reg.plugin_errors["pkg-missing"]
    assert reg.plugins == {"text": "mobius-text"}


def test_entry_point_without_distribution_is_named_by_its_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_entry_points(monkeypatch, FakeEntryPoint("solo", None, add_dummy))
    reg = Registry()
    reg.load_plugins()
    assert reg.plugins == {"solo": "fake_solo:register"}


# -- the real default registry ------------------------------------------------------------


def test_default_registry_discovers_every_domain_plugin() -> None:
    reg = mobius.registry
    reg.load_plugins()
    assert reg.plugin_errors == {}
    assert {"text", "vision", "audio", "diffusion"} <= set(reg.plugins)
    assert reg.plugins["text"] == "mobius-text"
    assert reg.plugins["vision"] == "mobius-vision"
    assert reg.plugins["audio"] == "mobius-audio"
    assert reg.plugins["diffusion"] == "mobius-diffusion"
    assert set(TEXT_KEYS) <= set(reg.keys())
    assert reg.get("llama").package == "mobius-text"


def test_fresh_discovering_registry_finds_text() -> None:
    reg = Registry()
    assert set(TEXT_KEYS) <= set(reg.keys())
    assert reg.plugin_errors == {}
    text = reg.by_package()["mobius-text"]
    assert [e.key for e in text] == sorted(e.key for e in text)
    assert {reg.get(k) for k in TEXT_KEYS} <= set(text)


def test_text_register_twice_on_the_default_registry_is_harmless() -> None:
    import mobius_text

    reg = mobius.registry
    before = {e.key: e for e in reg.entries()}
    mobius_text.register(reg)
    mobius_text.register(reg)
    assert {e.key: e for e in reg.entries()} == before
    assert reg.plugin_errors == {}
