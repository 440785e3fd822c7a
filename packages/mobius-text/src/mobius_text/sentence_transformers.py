"""The sentence-transformers source recogniser: a directory with ``modules.json`` builds its embedding.

A sentence-transformers model is an encoder checkpoint plus ``modules.json``,
which lists what runs after the encoder (``Pooling``, ``Normalize``...). With
``--head auto`` such a directory builds the ``sentence-embedding`` head, pooled
and normalised as its modules say; explicit ``--head``, ``--pooling`` and
``--normalize`` win (core's feature-extraction task reads the source's defaults).
"""

from __future__ import annotations

import json
from pathlib import Path

from mobius.errors import ConfigError, MobiusError
from mobius.options import POOLING_MODES
from mobius.source import ModelSource, lookup, model_source, read_json


def _inside(model_dir: Path, name: object) -> Path:
    """``model_dir / name`` for a module path read from modules.json, refused if it leaves the directory."""
    if not isinstance(name, str):
        raise ConfigError(
            f"modules.json in {model_dir}: a module path must be a string, not {name!r}"
        )
    path = (model_dir / name).resolve()
    if not path.is_relative_to(model_dir.resolve()):
        raise ConfigError(f"modules.json in {model_dir}: module path {name!r} leaves the directory")
    return path


def sentence_transformers_pooling(model_dir: Path) -> tuple[str, bool] | None:
    """``(pooling, normalize)`` of a sentence-transformers directory (modules.json), else None.

    Modules mobius does not build (a Dense projection, mean-sqrt-len pooling) are
    refused rather than left out, which would change the embeddings.
    """
    modules_path = model_dir / "modules.json"
    if not modules_path.is_file():
        return None
    try:
        modules = json.loads(modules_path.read_text(encoding="utf-8"))
        kinds = [str(m["type"]).rsplit(".", 1)[-1] for m in modules]
        paths = {str(m["type"]).rsplit(".", 1)[-1]: m.get("path", "") for m in modules}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"unreadable modules.json in {model_dir}: {exc}") from None
    unsupported = [k for k in kinds if k not in ("Transformer", "Pooling", "Normalize")]
    if unsupported:
        raise ConfigError(
            f"sentence-transformers modules {', '.join(unsupported)} in {model_dir} are not "
            "built by mobius; build the encoder alone with --head none"
        )
    mode = "mean"
    if "Pooling" in kinds:
        pooling = read_json(_inside(model_dir, paths["Pooling"]) / "config.json")
        modes = [
            m
            for m in ("cls", "mean", "max", "mean_sqrt_len")
            if pooling.get(f"pooling_mode_{m}_tokens" if m != "cls" else "pooling_mode_cls_token")
        ]
        if isinstance(pooling.get("pooling_mode"), str):
            modes = [pooling["pooling_mode"]]
        if len(modes) != 1 or modes[0] not in POOLING_MODES:
            raise ConfigError(
                f"sentence-transformers pooling {modes or 'none'} in {model_dir}: mobius pools "
                f"with one of {', '.join(POOLING_MODES)}"
            )
        mode = modes[0]
    return mode, "Normalize" in kinds


def recognise(path: Path, options, registry) -> ModelSource | None:
    """A sentence-transformers directory of a feature-extraction model, built with ``--head auto``.

    Returns core's :func:`~mobius.source.model_source` with the embedding head,
    pooling and normalisation of ``modules.json`` as its defaults. None for
    anything else, left to the other readers (and their errors): a directory
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
        return None
    source = model_source(path, registry, options)
    pooling, normalize = sentence_transformers_pooling(path)
    source.defaults.update(head="sentence-embedding", pooling=pooling, normalize=normalize)
    return source
