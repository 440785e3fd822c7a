"""The sentence-transformers source recogniser: a directory with ``modules.json`` builds its embedding.

A sentence-transformers model is an encoder checkpoint plus ``modules.json``,
which lists what runs after the encoder (``Pooling``, ``Normalize``...). With
``--head auto`` such a directory builds the ``sentence-embedding`` head, pooled
and normalised as its modules say; explicit ``--head``, ``--pooling`` and
``--normalize`` win (core's feature-extraction task reads the source's defaults).

A decoder checkpoint (``Qwen3ForCausalLM``, ``MistralModel``...) is built as its
bare model's ``text-encoder`` (``Qwen3Model``...) with the same head: a decoder
embedder, usually pooled at the last token. A ``CrossEncoder`` directory of a
causal LM (``Transformer`` then ``LogitScore``) builds a yes/no reranker from the
two token ids ``LogitScore`` names.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from mobius.errors import ConfigError, MobiusError
from mobius.options import POOLING_MODES
from mobius.safe_paths import join_inside
from mobius.source import ModelSource, lookup, model_source, read_json


def _inside(model_dir: Path, name: object) -> Path:
    """``model_dir / name`` for a module path read from modules.json; UnsafePathError if it
    leaves the directory (mobius's one safe join)."""
    return join_inside(model_dir, name, source=model_dir / "modules.json")


# The boolean keys of older Pooling configs (newer ones write ``pooling_mode``).
_LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


def _modules(model_dir: Path) -> dict[str, object]:
    """``modules.json``'s modules in order: each class name (``Pooling``) and its path."""
    try:
        modules = json.loads((model_dir / "modules.json").read_text(encoding="utf-8"))
        return {str(m["type"]).rsplit(".", 1)[-1]: m.get("path", "") for m in modules}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"unreadable modules.json in {model_dir}: {exc}") from None


def logit_score_tokens(model_dir: Path) -> tuple[int, int] | None:
    """The (true, false) token ids of a CrossEncoder's ``LogitScore`` module, else None."""
    paths = _modules(model_dir)
    if "LogitScore" not in paths:
        return None
    extra = sorted(set(paths) - {"Transformer", "LogitScore"})
    if extra:
        raise ConfigError(
            f"sentence-transformers modules {', '.join(extra)} in {model_dir} are not built by "
            "mobius beside LogitScore"
        )
    config = read_json(_inside(model_dir, paths["LogitScore"]) / "config.json")
    ids = config.get("true_token_id"), config.get("false_token_id")
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ConfigError(
            f"LogitScore in {model_dir}: mobius builds a true and a false token id, got {ids}"
        )
    if config.get("module_input_name", "causal_logits") != "causal_logits":
        raise ConfigError(f"LogitScore in {model_dir} reads {config['module_input_name']!r}")
    return ids


def bare_model_key(registry, path: Path, entry) -> str | None:
    """The registered ``text-encoder`` key of a causal LM's bare model (``qwen3``: ``Qwen3Model``),
    the class transformers' ``AutoModel`` makes of the config's ``model_type``."""
    if entry.task == "text-encoder":
        return entry.key
    if entry.task != "causal-lm":
        return None
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    model_type = read_json(path / "config.json").get("model_type")
    key = MODEL_MAPPING_NAMES.get(model_type) if isinstance(model_type, str) else None
    if not isinstance(key, str):
        return None
    if key in registry and registry.get(key).task == "text-encoder":
        return key
    return None


def sentence_transformers_pooling(model_dir: Path) -> tuple[str, bool] | None:
    """``(pooling, normalize)`` of a sentence-transformers directory (modules.json), else None.

    Modules mobius does not build (a Dense projection, mean-sqrt-len pooling) are
    refused rather than left out, which would change the embeddings.
    """
    if not (model_dir / "modules.json").is_file():
        return None
    paths = _modules(model_dir)
    kinds = list(paths)
    unsupported = [k for k in kinds if k not in ("Transformer", "Pooling", "Normalize")]
    if unsupported:
        raise ConfigError(
            f"sentence-transformers modules {', '.join(unsupported)} in {model_dir} are not "
            "built by mobius; build the encoder alone with --head none"
        )
    mode = "mean"
    if "Pooling" in kinds:
        pooling = read_json(_inside(model_dir, paths["Pooling"]) / "config.json")
        modes = [mode for key, mode in _LEGACY_POOLING_KEYS.items() if pooling.get(key)]
        if isinstance(pooling.get("pooling_mode"), str):
            modes = [pooling["pooling_mode"]]
        elif isinstance(pooling.get("pooling_mode"), list):  # several, concatenated
            modes = pooling["pooling_mode"]
        if len(modes) != 1 or modes[0] not in POOLING_MODES:
            raise ConfigError(
                f"sentence-transformers pooling {modes or 'none'} in {model_dir}: mobius pools "
                f"with one of {', '.join(POOLING_MODES)}"
            )
        mode = modes[0]
    return mode, "Normalize" in kinds


def _is_cross_encoder(model_dir: Path) -> bool:
    """A CrossEncoder's directory: a sequence classifier with no Pooling module."""
    architectures = read_json(model_dir / "config.json").get("architectures")
    first = architectures[0] if isinstance(architectures, list) and architectures else ""
    return "Pooling" not in _modules(model_dir) and str(first).endswith("ForSequenceClassification")


def recognise(path: Path, options, registry) -> ModelSource | None:
    """A sentence-transformers directory of an encoder or a decoder, built with ``--head auto``.

    Returns core's :func:`~mobius.source.model_source` with the embedding head,
    pooling and normalisation of ``modules.json`` as its defaults (a decoder: as its
    bare model's ``text-encoder``), or a ``LogitScore`` CrossEncoder's yes/no token
    ids. None for a CrossEncoder's sequence classifier and anything else, left to the other readers (and their errors): a directory
    without ``modules.json`` or without a usable ``config.json``, a model of
    another task, or an explicit ``--head`` (then ``modules.json`` is not read).
    """
    if options.head != "auto" or not path.is_dir() or not (path / "modules.json").is_file():
        return None
    try:
        entry = lookup(registry, path, options.model_type)
    except MobiusError:
        return None
    if entry.task != "feature-extraction":
        key = bare_model_key(registry, path, entry)
        if key is None:
            return None
        options = dataclasses.replace(options, model_type=key)
    source = model_source(path, registry, options)
    score_tokens = None if entry.task == "feature-extraction" else logit_score_tokens(path)
    if score_tokens is not None:
        source.defaults.update(score_tokens=score_tokens)
        return source
    if _is_cross_encoder(path):
        return None  # a sequence classifier (a reranker): its architecture gives the head
    pooling, normalize = sentence_transformers_pooling(path)
    source.defaults.update(head="sentence-embedding", pooling=pooling, normalize=normalize)
    return source
