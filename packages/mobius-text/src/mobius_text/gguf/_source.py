"""The ``.gguf`` source recogniser: a llama.cpp file builds like the HF checkpoint it came from.

A GGUF file carries its config (metadata under llama.cpp's keys) and its
vocabulary beside the weights. The header alone gives the registration, the HF
config and the tokenizer files; the tensors are read when the build applies them,
and their quantized blocks are kept as they are (:mod:`mobius.passes._blocks`).
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path

from mobius.source import ModelSource, hf_config_from_dict
from mobius_text.gguf._checkpoint import GGUFCheckpoint
from mobius_text.gguf._tokenizer import (
    UnsupportedTokenizerError,
    gguf_generation_config,
    gguf_tokenizer_files,
)


def tokenizer_files(checkpoint: GGUFCheckpoint) -> dict[str, str]:
    """The tokenizer files a GGUF file's metadata describes, or none (with a warning).

    A vocabulary mobius cannot rebuild does not stop the build: the graphs and
    weights are right, and a missing tokenizer is plain to see where a guessed one
    would tokenize wrongly without a word. ``generation_config.json`` (the special
    ids) is written either way.
    """
    metadata = checkpoint.file.metadata
    try:
        return gguf_tokenizer_files(metadata)
    except UnsupportedTokenizerError as exc:
        warnings.warn(f"no tokenizer files written: {exc}", stacklevel=3)
    generation = gguf_generation_config(metadata)
    if not generation:
        return {}
    return {"generation_config.json": json.dumps(generation, indent=2) + "\n"}


def config_file(hf_config) -> dict[str, str]:
    """``config.json``: the HF config the header describes, with llama.cpp's conventions filled."""
    return {"config.json": hf_config.to_json_string(use_diff=False)}


def stored_dtype(checkpoint: GGUFCheckpoint) -> str | None:
    """The GGML type that holds most of the weights' bytes, as ``"Q4_1 (GGUF)"``."""
    stored: Counter[str] = Counter()
    for weight in checkpoint.values():
        stored[weight.type_name] += weight.tensor.nbytes
    return f"{stored.most_common(1)[0][0]} (GGUF)" if stored else None


def tensor_types(checkpoint: GGUFCheckpoint) -> dict[str, dict[str, int]]:
    """The file's tensors by GGML type: count, bytes, and how many a build keeps as blocks."""
    types: dict[str, dict[str, int]] = {}
    for weight in checkpoint.values():
        row = types.setdefault(weight.type_name, {"tensors": 0, "bytes": 0, "kept": 0})
        row["tensors"] += 1
        row["bytes"] += weight.tensor.nbytes
        row["kept"] += weight.repackable
    return types


def recognise(path: Path, options, registry) -> ModelSource | None:
    """The :class:`~mobius.source.ModelSource` of a ``.gguf`` file, or None for anything else.

    The header is parsed here (cheap: the tensors stay on disk) and again when the
    build asks for the weights.

    Raises:
        CheckpointError: The file is missing, truncated or corrupt.
        ModelSourceError: Its architecture is not one mobius maps.
        UnknownModelTypeError: No installed package builds its model type.
    """
    if not (path.is_file() and path.suffix.lower() == ".gguf"):
        return None
    with GGUFCheckpoint.open(path) as checkpoint:
        fields = dict(checkpoint.config)
        entry = registry.get(fields["model_type"])
        hf_config = hf_config_from_dict(fields)
        text_files = {**config_file(hf_config), **tokenizer_files(checkpoint)}
        dtype = stored_dtype(checkpoint)
        types = tensor_types(checkpoint)
    return ModelSource(
        path=path,
        entry=entry,
        hf_config=hf_config,
        checkpoint=lambda: GGUFCheckpoint.open(path),
        source_dir=None,
        text_files=text_files,
        stored_dtype=dtype,
        tensor_types=types,
        prequantized=True,
    )
