"""ONNX Runtime GenAI packages: the ``genai_config.json`` that lets its generator run a build.

onnxruntime-genai reads one JSON file next to the graph: which model class to use
(``model.type``), the graph's input and output names (name templates for the
per-layer cache), the cache's shape (heads, head size, layers), the special token
ids and the search defaults. Mobius's causal-LM graphs follow the names it expects
(see :mod:`mobius.tasks._causal_lm`), so the file is written from the built graph
itself plus the source's ``generation_config.json``.

Attention layers must cache ``key`` and ``value`` with the same heads and head
size (the generator sizes that cache from ``head_size`` and
``num_key_value_heads``). Hybrid decoders qualify too when their family names a
generator class of its own (``genai_type``): a layer caching only ``conv_state``
is a short-convolution layer (``"conv"`` in the decoder's ``layer_types``), one
caching ``conv_state`` and ``ssm_state`` a gated linear-attention layer
(``"linear_attention"``); the generator carries those states from step to step.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx_ir as ir

from mobius.errors import MobiusError

FILENAME = "genai_config.json"

# onnxruntime-genai's generic decoder class, by the model type that selects it: a causal
# LM whose config names no type of its own (``ArchitectureConfig.genai_type`` is None)
# runs as this. The type only selects the generator's class; this one feeds input_ids,
# attention_mask, position_ids and the per-layer cache, the names mobius's graphs use.
GENERIC_DECODER_TYPE = "llama"

# generation_config.json keys copied into "search", with the generator's defaults.
SEARCH_DEFAULTS = {
    "diversity_penalty": 0.0,
    "do_sample": False,
    "length_penalty": 1.0,
    "no_repeat_ngram_size": 0,
    "num_beams": 1,
    "num_return_sequences": 1,
    "repetition_penalty": 1.0,
    "temperature": 1.0,
    "top_k": 50,
    "top_p": 1.0,
}

_CACHE_INPUT = re.compile(r"past_key_values\.(\d+)\.(\w+)")


class GenAIUnsupportedError(MobiusError):
    """The package cannot be described to onnxruntime-genai (not an attention-only causal LM)."""


def source_json(directory: Path | None, name: str) -> dict:
    """A JSON object file of the source directory, or ``{}`` when it is absent or unreadable."""
    if directory is None or not (directory / name).is_file():
        return {}
    try:
        data = json.loads((directory / name).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def companion_json(package, name: str) -> dict:
    """A JSON companion of ``package``: the one made in memory (a GGUF file's), else the source's."""
    text = getattr(package, "text_files", {}).get(name)
    if text is None:
        return source_json(package.source_dir, name)
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


# The generator's name for a layer by the state tensors it caches (HF's ``layer_types``).
STATE_LAYER_TYPES = {
    frozenset({"conv_state"}): "conv",
    frozenset({"conv_state", "ssm_state"}): "linear_attention",
}


@dataclass(frozen=True)
class CacheGeometry:
    """What the generator needs to know of a decoder's cache."""

    layers: int
    kv_heads: int
    head_size: int
    #: Per layer, ``"full_attention"`` or a state kind (``STATE_LAYER_TYPES``); None when
    #: every layer is an attention layer.
    layer_types: list[str] | None


def _cache_geometry(model: ir.Model, *, states: bool) -> CacheGeometry:
    """The cache of a graph whose attention layers cache key and value alike.

    ``states``: whether layers caching states (``STATE_LAYER_TYPES``) are allowed, which
    they are only where the family names a generator class of its own.
    """
    layers: dict[int, dict[str, tuple]] = {}
    for value in model.graph.inputs:
        match = _CACHE_INPUT.fullmatch(value.name or "")
        if match:
            dims = [getattr(d, "value", d) for d in (value.shape or ())]
            layers.setdefault(int(match[1]), {})[match[2]] = tuple(dims)
    if not layers:
        raise GenAIUnsupportedError("the graph has no key/value cache inputs")
    missing = sorted(set(range(max(layers) + 1)) - set(layers))
    if missing:
        raise GenAIUnsupportedError(
            f"layers {missing} have no cache; onnxruntime-genai packages need a cache on "
            "every layer"
        )
    shapes = set()
    layer_types = []
    for index, kinds in sorted(layers.items()):
        state_type = STATE_LAYER_TYPES.get(frozenset(kinds))
        # A gated linear-attention state is [batch, heads, key_dim, value_dim]; Mamba's
        # conv_state + ssm_state pair has a 3-D ssm_state the generator has no layer kind for.
        if state_type == "linear_attention" and len(kinds["ssm_state"]) != 4:
            state_type = None
        if state_type is not None and states:
            layer_types.append(state_type)
            continue
        if set(kinds) != {"key", "value"}:
            raise GenAIUnsupportedError(
                f"layer {index} caches {sorted(kinds)}; onnxruntime-genai packages need "
                "a key/value cache on every layer (attention-only models), or short-convolution "
                "and gated linear-attention states in a family with a generator class of its own"
            )
        key, value = kinds["key"], kinds["value"]
        if len(key) != 4 or not all(isinstance(key[i], int) for i in (1, 3)):
            raise GenAIUnsupportedError(f"layer {index} has a key cache of shape {key}")
        if key != value:
            raise GenAIUnsupportedError(
                f"layer {index} caches keys of shape {key} and values of shape {value}; "
                "onnxruntime-genai needs them alike (one head size)"
            )
        shapes.add((key[1], key[3]))
        layer_types.append("full_attention")
    if not shapes:
        raise GenAIUnsupportedError("the graph has no attention layer with a key/value cache")
    if len(shapes) != 1:
        raise GenAIUnsupportedError(
            f"cache shapes differ across layers ((kv_heads, head_size): {sorted(shapes)}); "
            "onnxruntime-genai needs one head size and one number of kv heads"
        )
    kv_heads, head_size = shapes.pop()
    hybrid = any(kind != "full_attention" for kind in layer_types)
    return CacheGeometry(len(layers), kv_heads, head_size, layer_types if hybrid else None)


def _cache_updated_in_place(model: ir.Model) -> bool:
    """Whether the cache lives only inside com.microsoft GroupQueryAttention nodes.

    That kernel writes the new keys and values into the cache in place (its slot
    counts come from attention_mask), so the generator can hand it one max_length
    buffer as both past and present. Any other reader of a past or present tensor
    (the standard Attention op, a Concat, a later layer sharing this one's cache)
    expects it at its true length, so then the buffers must stay separate. Only the
    key/value cache counts: the generator keeps a hybrid's states in buffers of their own.
    """
    key_value = re.compile(r"(past_key_values|present)\.\d+\.(key|value)")
    past = [v for v in model.graph.inputs if key_value.fullmatch(v.name or "")]
    present = [v for v in model.graph.outputs if key_value.fullmatch(v.name or "")]
    return all(
        node.op_type == "GroupQueryAttention" and node.domain == "com.microsoft"
        for value in past
        for node, _ in value.uses()
    ) and all(
        value.producer() is not None
        and value.producer().op_type == "GroupQueryAttention"
        and not value.uses()
        for value in present
    )


def token_ids(config: Any, generation: dict, source: dict) -> dict[str, Any]:
    """bos/eos/pad of the ``model`` section: ``generation`` (the source's
    ``generation_config.json``) first, as chat models list their turn end there, then
    ``source`` (its ``config.json``), then ``config`` (the mobius config)."""

    def pick(name: str):
        for where in (generation, source):
            if where.get(name) is not None:
                return where[name]
        return getattr(config, name, None)

    bos, eos, pad = pick("bos_token_id"), pick("eos_token_id"), pick("pad_token_id")
    if eos is None:
        raise GenAIUnsupportedError(
            "no eos_token_id in generation_config.json, config.json or the model config"
        )
    if pad is None:  # the generator needs one to pad finished rows; eos is what HF falls back to
        pad = eos[0] if isinstance(eos, list) else eos
    return {
        "bos_token_id": 1 if bos is None else bos,
        "eos_token_id": eos,
        "pad_token_id": pad,
    }


def genai_config(package, *, ep: str = "cpu") -> dict:
    """The ``genai_config.json`` content for a built causal-LM ``package``.

    Read from the package's graph (input and output names, cache geometry, whether
    attention is ``GroupQueryAttention``), its mobius config (sizes, context
    length, the generator's model type ``config.genai_type``) and the source's
    ``generation_config.json`` / ``config.json`` (token ids, search defaults).
    ``ep`` picks the generator's execution provider (``"cuda"`` asks for CUDA,
    anything else runs on CPU).

    Domain packages whose tasks the generator runs build their config on
    :func:`decoder_genai_config` (vision–language) or on the section helpers
    :func:`token_ids`, :func:`search_config` and :func:`session_options` (speech-to-text).

    Raises :class:`GenAIUnsupportedError` for a package onnxruntime-genai cannot run:
    not a causal LM, or a layer without a key/value cache (state-space layers).
    """
    if package.task != "causal-lm" or set(package.models) != {"model"}:
        raise GenAIUnsupportedError(
            f"--runtime ort-genai supports causal LMs only (this build is a {package.task!r} "
            f"package with graphs {sorted(package.models)})"
        )
    model = package.models["model"]
    config = package.config
    genai_type = getattr(config, "genai_type", None) or GENERIC_DECODER_TYPE
    return decoder_genai_config(package, model, config, "model.onnx", "input_ids", genai_type, ep)


def decoder_genai_config(package, model, config, filename, tokens_input, genai_type, ep) -> dict:
    """The config of a generator whose decoder graph is ``model`` (tokens as ``tokens_input``)."""
    geometry = _cache_geometry(model, states=genai_type != GENERIC_DECODER_TYPE)
    inputs = {value.name for value in model.graph.inputs}
    outputs = {value.name for value in model.graph.outputs}
    for needed in (tokens_input, "attention_mask"):
        if needed not in inputs:
            raise GenAIUnsupportedError(f"the graph has no {needed!r} input")
    if "logits" not in outputs:
        raise GenAIUnsupportedError("the graph has no 'logits' output")
    known = {tokens_input, "attention_mask", "position_ids"}
    # An input with an initializer of its name has a default (a LoRA input): unfed is fine.
    defaults = set(model.graph.initializers)
    extra = sorted(n for n in inputs - known - defaults if not _CACHE_INPUT.fullmatch(n))
    if extra:
        raise GenAIUnsupportedError(f"the generator does not feed the graph's inputs {extra}")

    source = companion_json(package, "config.json")
    generation = companion_json(package, "generation_config.json")
    context_length = getattr(config, "max_position_embeddings", None) or 2048

    graph_inputs = {tokens_input: tokens_input, "attention_mask": "attention_mask"}
    if "position_ids" in inputs:
        graph_inputs["position_ids"] = "position_ids"
    graph_inputs["past_key_names"] = "past_key_values.%d.key"
    graph_inputs["past_value_names"] = "past_key_values.%d.value"
    graph_outputs = {
        "logits": "logits",
        "present_key_names": "present.%d.key",
        "present_value_names": "present.%d.value",
    }
    decoder_extra: dict[str, Any] = {}
    if geometry.layer_types is not None:
        decoder_extra["layer_types"] = geometry.layer_types
        for state, name in (("conv_state", "conv"), ("ssm_state", "recurrent")):
            graph_inputs[f"past_{name}_names"] = f"past_key_values.%d.{state}"
            graph_outputs[f"present_{name}_names"] = f"present.%d.{state}"
        if "linear_attention" not in geometry.layer_types:
            del graph_inputs["past_recurrent_names"], graph_outputs["present_recurrent_names"]

    return {
        "model": {
            **token_ids(config, generation, source),
            "context_length": context_length,
            "decoder": {
                "session_options": session_options(ep),
                "filename": filename,
                "head_size": geometry.head_size,
                "hidden_size": getattr(config, "hidden_size", None) or source.get("hidden_size"),
                "inputs": graph_inputs,
                "outputs": graph_outputs,
                "num_attention_heads": getattr(config, "num_attention_heads", None)
                or geometry.kv_heads,
                "num_hidden_layers": geometry.layers,
                "num_key_value_heads": geometry.kv_heads,
                **decoder_extra,
            },
            "type": genai_type,
            "vocab_size": getattr(config, "vocab_size", None) or source.get("vocab_size"),
        },
        "search": search_config(
            generation, max_length=context_length, share_buffer=_cache_updated_in_place(model)
        ),
    }


def session_options(ep: str) -> dict:
    """A graph's ``session_options``: CUDA when ``ep`` is ``"cuda"``, else the CPU."""
    providers = [{"cuda": {}}] if ep == "cuda" else []
    return {"log_id": "onnxruntime-genai", "provider_options": providers}


def search_config(generation: dict, *, max_length: int, share_buffer: bool) -> dict:
    """The ``search`` section: ``generation`` (``generation_config.json``) over the generator's defaults.

    ``share_buffer`` is ``past_present_share_buffer``: whether the decoder updates its
    cache in place (one ``max_length`` buffer as both past and present).
    """
    # generation_config.json may hold nulls (``"top_k": null``); the generator wants values.
    search = {
        key: default if generation.get(key) is None else generation[key]
        for key, default in SEARCH_DEFAULTS.items()
    }
    search.update(
        early_stopping=True,
        max_length=max_length,
        min_length=0,
        past_present_share_buffer=share_buffer,
    )
    return dict(sorted(search.items()))


def write_genai_config(config: dict, directory: str | os.PathLike) -> Path:
    """Write ``config`` (from :func:`genai_config`) as ``directory/genai_config.json``."""
    path = Path(directory) / FILENAME
    path.write_text(json.dumps(config, indent=4) + "\n")
    return path
