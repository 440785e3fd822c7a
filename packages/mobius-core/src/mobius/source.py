"""What a build reads: a :class:`Source` yields the registration, the config, a lazy checkpoint and the extra files.

:func:`open_source` asks the source recognisers that domain packages register
(a diffusers pipeline directory, a lone adapter file, a GGUF file, a
sentence-transformers directory...) and falls back on core's own reader: a model
directory with ``config.json`` and its weights (:func:`model_source`).

A source builds itself: :meth:`Source.build` returns the package. A
:class:`ModelSource` is one model; a domain package may add sources that build
several (a pipeline builds one :class:`ModelSource` per component).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx_ir as ir

from mobius._graphs import DTYPES, cast_parameters, parse_dtype
from mobius._package import ModelPackage
from mobius._record import ENTRY_META
from mobius.errors import CheckpointError, ConfigError, MobiusError, ModelSourceError
from mobius.passes._stages import run_stage
from mobius.weights import apply_weights, checkpoint_dtype, parameters

# What a config that mobius cannot build raises while it is read or normalised (a
# field of the wrong type, a missing one, a zero head count): refused as ConfigError.
CONFIG_FAILURES = (
    TypeError,
    ValueError,
    KeyError,
    AttributeError,
    IndexError,
    ZeroDivisionError,
    OverflowError,
)

# Sizes no real model comes near; past them a config is corrupt, and building its
# graph would only exhaust memory (80 million layers, a 2**40 vocabulary).
SIZE_LIMITS = {
    "num_hidden_layers": 1 << 12,
    "num_layers": 1 << 12,
    "hidden_size": 1 << 20,
    "intermediate_size": 1 << 22,
    "head_dim": 1 << 16,
    "num_attention_heads": 1 << 14,
    "num_key_value_heads": 1 << 14,
    "vocab_size": 1 << 24,
    "max_position_embeddings": 1 << 25,
    "num_local_experts": 1 << 14,
    "num_experts": 1 << 14,
}

logger = logging.getLogger("mobius")


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (its type name when it has none)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def read_json(path: Path) -> dict:
    """A JSON object file; unreadable is a ModelSourceError, not an object a ConfigError."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise ModelSourceError(f"unreadable {path.name} in {path.parent}: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path.name} in {path.parent} is not a JSON object")
    return raw


def read_config_json(model_dir: Path) -> dict:
    """A model directory's ``config.json`` as a dict with a string ``model_type``."""
    config_path = model_dir / "config.json"
    if not config_path.is_file():
        raise ModelSourceError(f"no config.json in {model_dir}")
    raw = read_json(config_path)
    model_type = raw.get("model_type")
    if not model_type:
        raise ModelSourceError(f"config.json in {model_dir} has no model_type")
    if not isinstance(model_type, str):
        raise ConfigError(f"config.json in {model_dir}: model_type must be a string")
    return raw


def lookup(registry, model_dir: Path, model_type: str | None = None):
    """The registration for a model directory's config, refusing configs that need their own code.

    The key is ``model_type`` when given, else a registered architecture class of
    ``config.json``'s ``architectures`` (an encoder-only class of an
    encoder–decoder type), else the config's ``model_type``.

    ``auto_map`` names Python files of the model's repository
    (``trust_remote_code``). mobius never runs them: a config whose type mobius
    does not register itself is refused with that reason, and a registered type
    is built by mobius's own code, the ``auto_map`` ignored.
    """
    raw = read_config_json(model_dir)
    if model_type is not None:
        return registry.get(model_type)
    architectures = raw.get("architectures")
    for architecture in architectures if isinstance(architectures, list) else []:
        if isinstance(architecture, str) and architecture in registry:
            return registry.get(architecture)
    model_type = raw["model_type"]
    if raw.get("auto_map") and model_type not in registry:
        raise ConfigError(
            f"model_type {model_type!r} of {model_dir} is defined by code in the model's "
            "repository (auto_map, trust_remote_code): mobius never runs a model's own code, "
            "and builds only the architectures it implements (mobius list)"
        )
    return registry.get(model_type)


@contextlib.contextmanager
def quiet_transformers():
    """transformers' own warnings off while it reads a config: mobius reports what matters."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def load_hf_config(model_dir: Path) -> Any:
    """The transformers config object of a model directory (no model code, no torch)."""
    from transformers import AutoConfig

    read_config_json(model_dir)
    try:
        with quiet_transformers():
            return AutoConfig.from_pretrained(model_dir, trust_remote_code=False)
    except OSError as exc:
        raise ModelSourceError(f"cannot read the config in {model_dir}: {exc}") from None
    except Exception as exc:  # transformers' own validation of the fields
        raise ConfigError(f"invalid config in {model_dir}: {one_line(exc)}") from exc


def hf_config_from_dict(fields: dict) -> Any:
    """A transformers config object from a config dict (as a GGUF header gives it)."""
    from transformers import AutoConfig

    fields = dict(fields)
    try:
        with quiet_transformers():
            return AutoConfig.for_model(fields.pop("model_type"), **fields)
    except Exception as exc:  # transformers' own validation of the fields
        raise ConfigError(f"unusable model config: {one_line(exc)}") from exc


def _flat_sizes(value: Any) -> list[Any]:
    """The entries of a size: itself, or those of a (nested) per-layer or per-block list."""
    entries, pending = [], [value]
    while pending:  # a loop, not recursion: a file may nest lists deeply
        item = pending.pop()
        if isinstance(item, (list, tuple)):
            pending.extend(reversed(item))
        else:
            entries.append(item)
    return entries


def check_sizes(
    hf_config: Any, source: Path | str, limits: Mapping[str, int | tuple[int, int]] | None = None
) -> None:
    """Refuse a config whose sizes are not integers within their limits.

    ``limits`` maps field names to their largest value (the smallest is 0) or to a
    ``(smallest, largest)`` pair; by default those the config's class declares (a
    ``size_limits`` class attribute: a domain package's config class, such as a
    diffusers component's), else :data:`SIZE_LIMITS`. A size may also be a list (per
    layer, per block; nested lists too) of such integers, or null.
    """
    if limits is None:  # the class's, never the instance's: a config file cannot set it
        limits = getattr(type(hf_config), "size_limits", SIZE_LIMITS)
    for name, bounds in limits.items():
        low, limit = bounds if isinstance(bounds, tuple) else (0, bounds)
        try:
            value = getattr(hf_config, name, None)
        except Exception:  # a per-layer attribute that the config will not give globally
            continue
        for v in _flat_sizes(value):
            if v is None:
                continue
            if isinstance(v, float) and v.is_integer():  # MusicFlamingo's rope_theta (1200.0)
                v = int(v)
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= limit:
                listed = isinstance(value, (list, tuple))
                shown = f"{name} holds {v!r}" if listed else f"{name} = {value!r}"
                raise ConfigError(
                    f"config of {source}: {shown} is not an integer from {low} to {limit}"
                )


class Source:
    """Something ``mobius build`` can read; :meth:`build` makes its package."""

    path: Path

    def build(self, options, registry):
        """The :class:`~mobius.ModelPackage` of this source, built with ``options``."""
        raise NotImplementedError


@dataclass
class ModelSource(Source):
    """One model: its registration, config, lazy checkpoint and companion files.

    ``checkpoint`` opens the lazy tensor mapping (called only when weights are
    loaded). ``source_dir`` is where companions (config, tokenizer) are copied
    from; ``text_files`` are companions made in memory (a GGUF file's tokenizer).
    ``defaults`` are option values the source implies where the user set none
    (a sentence-transformers directory's pooling); ``stored_dtype`` names the
    checkpoint's stored type for ``mobius info``, ``tensor_types`` its tensors by
    stored type (``{"Q4_K": {"tensors": 98, "bytes": 70_000_000, "kept": 98}}``:
    ``kept`` of them stay quantized blocks in a build). ``prequantized`` marks
    weights whose blocks the build keeps instead of dequantizing or re-rounding.
    """

    path: Path
    entry: Any
    hf_config: Any
    checkpoint: Callable[[], Mapping[str, Any]] | None = None
    source_dir: Path | None = None
    text_files: dict[str, str] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    stored_dtype: str | None = None
    tensor_types: dict[str, dict[str, int]] = field(default_factory=dict)
    prequantized: bool = False
    #: Called on the module tree once made (``--adapter-inputs`` puts LoRA layers in it).
    module_hooks: list[Callable[[Any], None]] = field(default_factory=list)

    def make_module(self, task, options) -> tuple[Any, Any]:
        """The normalised config (with the task's options applied) and the module tree."""
        check_sizes(self.hf_config, self.path)
        try:
            config = self.entry.config_class().from_hf(self.hf_config)
            config = task.configure(config, options, self)
            module = self.entry.module_class()(config)
        except MobiusError:
            raise
        except CONFIG_FAILURES as exc:
            raise ConfigError(
                f"the config of {self.path} cannot be built as {self.entry.key}: "
                f"{type(exc).__name__}: {one_line(exc)}"
            ) from exc
        for hook in self.module_hooks:
            hook(module)
        return config, module

    def build(self, options, registry):
        """The package of this model: config → module tree → graphs → weights → passes.

        The graphs are made for the task's contract (``options.ep`` targets the
        runtime), the checkpoint's tensors (after the family's
        :meth:`~mobius.model.Model.sanitize`) applied, every parameter filled and every tensor
        used or ignored, then the ``weights`` and ``quantize`` stages of
        :mod:`mobius.passes` run.
        """
        check_plugin_options(options, self.entry, registry)
        task = registry.task(self.entry.task, ep=options.ep)
        config, module = self.make_module(task, options)
        checkpoint = self.checkpoint() if options.load_weights and self.checkpoint else None
        dtype = parse_dtype(options.dtype)
        if dtype is None:
            dtype = (checkpoint_dtype(checkpoint) if checkpoint else None) or ir.DataType.FLOAT
        if dtype not in DTYPES.values():
            raise CheckpointError(f"checkpoint dtype {dtype.name} is not one mobius builds in")
        if options.ep == "cuda" and dtype == ir.DataType.FLOAT:
            logger.warning(
                "--ep cuda with float32 weights: ONNX Runtime's CUDA attention kernels take "
                "f16/bf16 only, so attention runs unfused or on the CPU; build with --dtype f16"
            )

        cast_parameters(module, dtype)
        models = task.build(module, config, dtype)
        for model in models.values():  # which registration made it, for the build record
            model.meta[ENTRY_META] = self.entry
        declared = {name for model in models.values() for name in parameters(model)}
        run_stage("graph", models.values(), options)
        unread = declared - {name for model in models.values() for name in parameters(model)}
        package = ModelPackage(models=models, config=config, task=task.name)
        package.source_dir = self.source_dir
        package.text_files.update(self.text_files)
        if checkpoint is None:
            return package
        weights = module.sanitize(dict(checkpoint))
        apply_weights(models.values(), weights, ignore=module.ignored, unread=unread)
        run_stage("weights", models.values(), options, weights)
        run_stage("quantize", models.values(), options, weights if self.prequantized else None)
        return package


def check_plugin_options(options, entry, registry) -> None:
    """Refuse unknown plugin options, and registered ones set for a task they do not apply to."""
    known = {o.dest: o for o in registry.options("build")}
    for name, value in options.plugin.items():
        option = known.get(name)
        if option is None:
            raise MobiusError(
                f"unknown build option {name!r}"
                + (f"; known: {', '.join(sorted(known))}" if known else "")
            )
        if option.tasks and entry.task not in option.tasks and value != option.default:
            flag = option.flags[0]
            raise MobiusError(
                f"{flag} applies to {' and '.join(option.tasks)} models; {entry.key} is a "
                f"{entry.task} model"
            )


def model_source(path: Path, registry, options) -> ModelSource:
    """Core's reader: a model directory with ``config.json`` and safetensors (or, if allowed, pickles)."""
    from mobius.weights._open import open_checkpoint

    if path.is_file():
        raise ModelSourceError(
            f"expected a model directory or a file that an installed mobius package reads "
            f"(mobius-text: .gguf; mobius-diffusion: single-file adapters), got file: {path}"
        )
    entry = lookup(registry, path, options.model_type)  # an unknown type fails first
    raw = read_config_json(path)
    dtype = raw.get("torch_dtype") or raw.get("dtype")
    return ModelSource(
        path=path,
        entry=entry,
        hf_config=load_hf_config(path),
        checkpoint=lambda: open_checkpoint(path, allow_pickle=options.allow_pickle),
        source_dir=path,
        stored_dtype=dtype if isinstance(dtype, str) else None,
    )


def open_source(path: Path, options, registry) -> Source:
    """The source at a resolved local ``path``: a registered recogniser's, else :func:`model_source`."""
    for info in registry.sources():
        source = info.function()(path, options, registry)
        if source is not None:
            return source
    return model_source(path, registry, options)
