"""The pieces of ``mobius info`` that need no domain package: verified keys, config-only resolve."""

from __future__ import annotations

import itertools
import json
import logging
from pathlib import Path

import huggingface_hub
import pytest

from mobius._registry import Registry
from mobius.cli import main
from mobius.errors import ModelSourceError
from mobius.weights._resolve import HUB_CONFIG_PATTERNS, resolve_config


@pytest.fixture
def resource_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An importable package ``fake_domain_<n>`` to hold a verified-keys file.

    Each test gets its own name: an imported package stays in ``sys.modules``.
    """
    package = tmp_path / "importable" / f"fake_domain_{next(_names)}"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(package.parent))
    return package


_names = itertools.count()


def make_registry() -> Registry:
    registry = Registry(discover=False)
    for key in ("alpha", "beta"):
        registry.register(key, object, task="causal-lm", package="fake-domain")
    registry.register("gamma", object, task="causal-lm", package="other-domain")
    return registry


@pytest.mark.parametrize("as_object", [False, True], ids=["list", "object"])
def test_declared_verified_keys_are_read_lazily(resource_package: Path, as_object: bool) -> None:
    registry = make_registry()
    registry.declare_verified("fake-domain", f"{resource_package.name}:verified.json")
    # Declaring reads nothing: the file may appear later, up to the first question.
    keys = ["alpha"]
    (resource_package / "verified.json").write_text(
        json.dumps({"verified": keys} if as_object else keys)
    )
    assert registry.is_verified("alpha") is True
    assert registry.is_verified("beta") is False
    assert registry.is_verified("gamma") is None  # its package declares no list
    assert registry.is_verified("delta") is None  # not registered
    assert registry.verified_keys("fake-domain") == frozenset({"alpha"})
    # Read once: a later change of the file is not seen until declared again.
    (resource_package / "verified.json").write_text(json.dumps(["alpha", "beta"]))
    assert registry.is_verified("beta") is False
    registry.declare_verified("fake-domain", f"{resource_package.name}:verified.json")
    assert registry.is_verified("beta") is True


def test_verified_by_names_the_test_or_the_run(resource_package: Path) -> None:
    """The build record's ``verified_by``: the key's own test, else the run that wrote the list."""
    registry = make_registry()
    (resource_package / "verified.json").write_text(
        json.dumps(
            {
                "generated_by": "scripts/support_table.py",
                "transformers": "5.24.0",
                "verified": ["alpha", "beta"],
                "tests": {"alpha": "tests/test_parity.py::test_causal_lm_parity", "beta": 3},
            }
        )
    )
    registry.declare_verified("fake-domain", f"{resource_package.name}:verified.json")
    assert registry.verified_by("alpha") == (
        "fake-domain: tests/test_parity.py::test_causal_lm_parity"
    )
    # A test of the wrong type is ignored: the answer is less precise, not wrong.
    assert registry.verified_by("beta") == (
        "fake-domain's parity suite (scripts/support_table.py against transformers 5.24.0)"
    )
    assert registry.verified_by("gamma") is None  # its package declares no list
    assert registry.verified_by("delta") is None  # not registered


def test_unreadable_verified_list_means_unknown(
    resource_package: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = make_registry()
    (resource_package / "verified.json").write_text('{"verified": "alpha"}')
    registry.declare_verified("fake-domain", f"{resource_package.name}:verified.json")
    with caplog.at_level(logging.WARNING, logger="mobius._registry"):
        assert registry.is_verified("alpha") is None
    assert "verified keys of fake-domain" in caplog.text
    with pytest.raises(ValueError, match="import.name:file"):
        registry.declare_verified("fake-domain", "verified.json")


def test_resolve_config_fetches_only_config_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def fake_snapshot_download(repo_id, **kwargs):
        calls.append((repo_id, kwargs))
        return str(tmp_path)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot_download)
    assert resolve_config("org/model", revision="v1") == tmp_path
    [(repo_id, kwargs)] = calls
    assert repo_id == "org/model" and kwargs["revision"] == "v1"
    assert (
        kwargs["allow_patterns"] == HUB_CONFIG_PATTERNS == ["config.json", "generation_config.json"]
    )
    assert kwargs["local_files_only"] is True  # the autouse fixture turns offline mode on


def test_resolve_config_keeps_local_paths(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert resolve_config(tmp_path) == tmp_path
    assert resolve_config(str(gguf)) == gguf
    with pytest.raises(ModelSourceError, match="no such file"):
        resolve_config(str(tmp_path / "missing.gguf"))


def test_info_of_an_uncached_hub_id_offline(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["info", "some-org/some-model"])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.strip() == (
        "mobius: error: model 'some-org/some-model' is not in the local cache and offline "
        "mode is on (HF_HUB_OFFLINE=1)"
    )
