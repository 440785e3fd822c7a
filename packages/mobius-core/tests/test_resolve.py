"""Tests for resolve_model. None of them may reach the network."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import constants
from huggingface_hub.errors import RepositoryNotFoundError

from mobius.errors import ModelSourceError
from mobius.weights._resolve import resolve_model


@pytest.fixture(autouse=True)
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the hub cache at an empty temp dir and turn offline mode on.

    huggingface_hub reads HF_HOME / HF_HUB_OFFLINE into module constants at
    import time, so the constants are patched as well as the environment.
    """
    home = tmp_path / "hf_home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return home


def test_local_directory(tmp_path: Path) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    assert resolve_model(model_dir) == model_dir
    assert resolve_model(str(model_dir)) == model_dir


def test_gguf_file(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert resolve_model(gguf) == gguf


def test_other_file_is_rejected_by_the_build(tmp_path: Path) -> None:
    """resolve_model returns any local file; no source recogniser claims this one, so build refuses."""
    import mobius

    weights = tmp_path / "pytorch_model.bin"
    weights.write_bytes(b"\0" * 8)
    assert resolve_model(weights) == weights
    with pytest.raises(ModelSourceError, match="got file"):
        mobius.build(weights)


def test_single_safetensors_file_is_returned(tmp_path: Path) -> None:
    """A lone .safetensors file (an IP-Adapter) is a model source; build decides what it is."""
    weights = tmp_path / "ip-adapter.safetensors"
    weights.write_bytes(b"\0" * 8)
    assert resolve_model(weights) == weights


@pytest.mark.parametrize("model", ["./no/such/dir", "/no/such/dir", "has spaces in it", "a/b/c"])
def test_not_a_path_nor_a_repo_id(model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args, **kwargs):
        raise AssertionError("must not consult the hub")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
    with pytest.raises(ModelSourceError, match="no such directory: "):
        resolve_model(model)


def test_missing_gguf_file(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="no such file: "):
        resolve_model(str(tmp_path / "missing.gguf"))


def test_missing_path_object_is_not_a_repo_id() -> None:
    with pytest.raises(ModelSourceError, match="no such directory"):
        resolve_model(Path("org/name"))


def test_offline_id_not_in_cache() -> None:
    with pytest.raises(ModelSourceError) as e:
        resolve_model("some-org/not-cached-model")
    message = str(e.value)
    assert "some-org/not-cached-model" in message
    assert "not in the local cache" in message
    assert "offline" in message
    assert "\n" not in message


def test_offline_env_set_after_import(monkeypatch: pytest.MonkeyPatch) -> None:
    # The constant was read before the variable was set: the env var alone must suffice.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    calls: list[dict] = []

    def fake(repo_id, **kwargs):
        calls.append(kwargs)
        raise huggingface_hub.errors.LocalEntryNotFoundError("not cached")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    with pytest.raises(ModelSourceError, match="offline mode is on"):
        resolve_model("org/name")
    assert calls[0]["local_files_only"] is True


def test_offline_cached_snapshot(offline_hub: Path) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = offline_hub / "hub" / "models--org--cached"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    assert resolve_model("org/cached") == snapshot


def test_download_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    calls: list[tuple[str, dict]] = []

    def fake(repo_id, **kwargs):
        calls.append((repo_id, kwargs))
        return str(tmp_path)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    assert resolve_model("org/name", revision="v1") == tmp_path
    repo_id, kwargs = calls[0]
    assert repo_id == "org/name"
    assert kwargs["revision"] == "v1"
    assert kwargs["local_files_only"] is False
    patterns = kwargs["allow_patterns"]
    for wanted in ["config.json", "generation_config.json", "tokenizer.json", "*.safetensors"]:
        assert wanted in patterns
    assert "*.safetensors.index.json" in patterns
    for unwanted in ["*.bin", "*.pt", "*.gguf", "*.onnx", "*"]:
        assert unwanted not in patterns
    # Mistral's own format beside the transformers weights: the same tensors twice.
    assert fnmatch.fnmatch("consolidated.safetensors", kwargs["ignore_patterns"][0])


def test_hub_error_becomes_model_source_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)

    class NotFound(RepositoryNotFoundError):
        def __init__(self, message: str) -> None:  # skip the HTTP response it requires
            Exception.__init__(self, message)

    def fake(repo_id, **kwargs):
        raise NotFound("404 Client Error.\n\nRepository Not Found for url")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    with pytest.raises(ModelSourceError) as e:
        resolve_model("org/missing")
    message = str(e.value)
    assert "'org/missing'" in message
    assert "404 Client Error." in message
    assert "\n" not in message
    assert isinstance(e.value.__cause__, RepositoryNotFoundError)


def test_network_error_becomes_model_source_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)

    def fake(repo_id, **kwargs):
        raise ConnectionError("connection refused")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    with pytest.raises(ModelSourceError, match=r"'org/name'.*connection refused.*no network"):
        resolve_model("org/name")


def test_a_mistyped_local_path_is_not_reported_as_a_hub_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "models/lama" is shaped like a hub id, but models/ is a directory here: a typo.
    (tmp_path / "models" / "llama").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def fake(repo_id, **kwargs):
        raise ConnectionError("connection refused")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    with pytest.raises(
        ModelSourceError, match=r"^no such directory: models/lama \(models/ is here"
    ):
        resolve_model("models/lama")
    # An id whose first part is not a local directory: the network is named.
    with pytest.raises(
        ModelSourceError, match=r"cannot reach the hub to fetch 'org/name'.*no network"
    ):
        resolve_model("org/name")
