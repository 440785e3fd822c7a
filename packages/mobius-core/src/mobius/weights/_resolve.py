"""Turn a model argument (local directory, ``.gguf`` file or hub repo id) into a local path."""

from __future__ import annotations

import os
import pathlib

from mobius.errors import ModelSourceError
from mobius.plugins import load

#: The sentencepiece models tokenizers read, under the names checkpoints give them
#: (Llama, T5, XLM-R and NLLB, Marian's two, SpeechT5's character model).
SENTENCEPIECE_FILES = (
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "source.spm",
    "target.spm",
    "spm_char.model",
)

#: The files fetched from the hub: configs, tokenizer files and safetensors weights only.
HUB_ALLOW_PATTERNS = [
    "config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "processor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.json",
    "chat_template.jinja",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    *SENTENCEPIECE_FILES,
    # sentence-transformers: how the token states become one embedding
    "modules.json",
    "*_Pooling/config.json",
    "*.safetensors",
    "*.safetensors.index.json",
    # a diffusers pipeline's index: mobius-diffusion's source then names its component files
    "model_index.json",
]

#: Never fetched by the first download: Mistral's own checkpoint format, which repos such
#: as Mistral-7B-Instruct-v0.3 and Voxtral ship beside the transformers weights (the same
#: tensors again under other names; mobius reads the transformers ones).
HUB_IGNORE_PATTERNS = ["consolidated*.safetensors"]

#: Added to the downloads with ``allow_pickle``: pickled PyTorch weights.
HUB_PICKLE_PATTERNS = ["pytorch_model*.bin", "pytorch_model.bin.index.json", "*.pt", "*.pth"]

#: The files :func:`resolve_config` fetches: what describes a model, no weights.
HUB_CONFIG_PATTERNS = ["config.json", "generation_config.json"]


def resolve_model(
    model: str | os.PathLike[str],
    *,
    revision: str | None = None,
    allow_pickle: bool = False,
    registry=None,
) -> pathlib.Path:
    """Return a local path holding ``model``, downloading it from the hub if needed.

    ``model`` may be an existing directory, ``.gguf`` file or single-file
    ``.safetensors`` adapter (each returned as is) or a hub repo id such as
    ``org/name``; a repo id is fetched into the local hub cache (configs, tokenizer
    and safetensors files only; pickled weights too with ``allow_pickle``). With ``HF_HUB_OFFLINE=1``
    only the local cache is consulted. A registered source that needs more than that
    first snapshot (a pipeline's component folders) names the files of a second
    download (:attr:`mobius.plugins.SourceInfo.hub_files`).

    Raises:
        ModelSourceError: ``model`` is neither a usable local path nor a repo id
            that can be fetched (or found in the cache when offline).
    """
    path = pathlib.Path(model).expanduser()
    if path.is_dir():
        return path
    if path.is_file():
        return path  # which files a build reads is up to the source recognisers
    if not isinstance(model, str) or not _is_repo_id(model):
        what = "file" if path.suffix.lower() == ".gguf" else "directory"
        raise ModelSourceError(f"no such {what}: {model}")
    patterns = HUB_ALLOW_PATTERNS + (HUB_PICKLE_PATTERNS if allow_pickle else [])
    try:
        local = _download(model, revision, patterns, HUB_IGNORE_PATTERNS)
    except ModelSourceError as exc:
        raise _as_local_typo(model, exc) from exc.__cause__
    if registry is None:
        from mobius._registry import registry
    for source in registry.sources():
        wanted = load(source.hub_files)(local, allow_pickle) if source.hub_files else None
        if wanted is not None:
            allow, ignore = wanted
            return _download(model, revision, list(allow), list(ignore) or None)
    return local


def resolve_config(model: str | os.PathLike[str], *, revision: str | None = None) -> pathlib.Path:
    """Like :func:`resolve_model`, but a hub repo id fetches only its config files.

    Only ``config.json`` and ``generation_config.json`` are downloaded (into the
    local hub cache), never the weights: enough to describe or build the graph of
    a model without its parameters. Local directories and ``.gguf`` files are
    returned as they are. With ``HF_HUB_OFFLINE=1`` only the local cache is consulted.

    Raises:
        ModelSourceError: as :func:`resolve_model`.
    """
    path = pathlib.Path(model).expanduser()
    if path.exists() or not isinstance(model, str) or not _is_repo_id(model):
        return resolve_model(model, revision=revision)  # local paths and their errors
    return _download(model, revision, HUB_CONFIG_PATTERNS)


def _as_local_typo(model: str, exc: ModelSourceError) -> ModelSourceError:
    """``exc``, or "no such directory" when ``model`` reads as a local path (its first part
    is a directory here, as in ``models/llama`` with ``models/`` present)."""
    first = pathlib.Path(model).parts[0]
    if not pathlib.Path(first).is_dir():
        return exc
    return ModelSourceError(f"no such directory: {model} ({first}/ is here; as a hub id: {exc})")


_NETWORK_ERRORS = (
    "ConnectError",
    "ConnectionError",
    "ConnectTimeout",
    "Timeout",
    "OfflineModeIsEnabled",
)


def _is_repo_id(text: str) -> bool:
    """Whether ``text`` is shaped like a hub repo id (``name`` or ``namespace/name``)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if text.lower().endswith(".gguf"):
        return False  # a missing local file, not a repo
    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return True


_OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def _offline() -> bool:
    """Whether hub offline mode is on, per the library's constant or the environment now."""
    from huggingface_hub import constants

    flags = (os.environ.get(var, "").strip().upper() for var in _OFFLINE_VARS)
    return bool(constants.HF_HUB_OFFLINE) or any(f in {"1", "ON", "YES", "TRUE"} for f in flags)


def _download(
    repo_id: str,
    revision: str | None,
    patterns: list[str] = HUB_ALLOW_PATTERNS,
    ignore: list[str] | None = None,
) -> pathlib.Path:
    from huggingface_hub import snapshot_download

    offline = _offline()
    try:
        local = snapshot_download(
            repo_id,
            revision=revision,
            allow_patterns=patterns,
            ignore_patterns=ignore,
            local_files_only=offline,
        )
    except Exception as e:  # any hub, network or cache failure
        at = f" at revision {revision!r}" if revision else ""
        if offline:
            raise ModelSourceError(
                f"model {repo_id!r}{at} is not in the local cache and offline mode is on "
                "(HF_HUB_OFFLINE=1)"
            ) from e
        reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
        detail = f"{type(e).__name__}: {reason}" if reason else type(e).__name__
        chain = [e, e.__cause__, e.__context__]
        if any(type(x).__name__ in _NETWORK_ERRORS for x in chain if x is not None):
            raise ModelSourceError(
                f"cannot reach the hub to fetch {repo_id!r}{at} ({detail}): no network? A model "
                "already in the local cache builds with HF_HUB_OFFLINE=1"
            ) from e
        raise ModelSourceError(f"cannot fetch model {repo_id!r}{at} from the hub ({detail})") from e
    return pathlib.Path(local)
