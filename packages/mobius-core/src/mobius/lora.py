"""PEFT LoRA adapters merged into a checkpoint's weights, as peft's ``merge_and_unload`` does.

A PEFT LoRA adapter is a directory with ``adapter_config.json`` and
``adapter_model.safetensors``. Each adapted linear layer ``M`` has two tensors,
``base_model.model.M.lora_A.weight`` ``[r, in]`` and ``base_model.model.M.lora_B.weight``
``[out, r]``; merging replaces the base weight ``M.weight`` ``[out, in]`` by::

    W + scale * (B @ A)        scale = alpha / r   (alpha / sqrt(r) with use_rslora)

transposed where ``fan_in_fan_out`` says the layer stores ``[in, out]`` (GPT-2's Conv1D).
``r`` and ``alpha`` are the config's ``r`` and ``lora_alpha``, or, for a module a key of
``rank_pattern`` / ``alpha_pattern`` matches (peft's rule: the key is a regex that ends the
module name at a dot), that key's value.

Use:

    adapter = LoraAdapter.read(adapter_dir)       # config checked, tensors opened lazily
    weights = merge_lora(checkpoint, adapter)     # a new mapping; nothing is read yet
    package.text_files[MERGE_RECORD] = adapter.record_json()

:func:`merge_lora` fits mobius's streaming weight pipeline: each merged weight is a
:class:`~mobius.weights.DerivedTensor`, computed when the build writes it, so a build
still holds about one tensor at a time. It matches the adapter's module names to the
checkpoint's names through ``renames`` (a model's checkpoint prefixes, the
:func:`~mobius.weights.rename_prefixes` rule, applied to both sides: an adapter made on
the hub's layout then merges into transformers 5's and back), and ``adapter_renames``
(applied to the adapter's names first: an adapter trained on a submodule, such as the
text decoder alone, whose names lack the wrapper's prefix).

Strict, like the rest of the pipeline: every adapter tensor is used (a tensor that is no
LoRA A/B weight, a module outside ``target_modules``, a weight the checkpoint lacks: the
build fails naming it), shapes are checked before anything is read, and the adapter
variants whose merge is more than ``B @ A`` (DoRA, LoRA biases, ``modules_to_save``,
trainable tokens...) are refused by name. Merged weights keep the base weight's dtype
(computed in float32, then cast back, as peft merges a bf16 model).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir

from mobius.errors import CheckpointError, MobiusError, WeightMismatchError
from mobius.weights import DerivedTensor, SafetensorsCheckpoint, rename_prefixes

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
#: What a package built with a merged adapter keeps to say so (:meth:`LoraAdapter.record`).
MERGE_RECORD = "merged_adapter.json"
#: The prefix peft puts before every module name it saves.
PEFT_PREFIX = "base_model.model."
#: The file of one adapter in a ``--adapter-inputs`` package: ``<name>.onnx_adapter``.
ADAPTER_SUFFIX = ".onnx_adapter"
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_A, _B = ".lora_A.weight", ".lora_B.weight"
# A pattern from a stranger's file is compiled and matched: keep it to a sane size.
_MAX_PATTERN = 1000

#: ``adapter_config.json`` fields that make merging more than ``W + scale * B @ A``: each
#: must be absent or off (null, false, empty).
_REFUSED = {
    "use_dora": "DoRA (a learned magnitude per output)",
    "lora_bias": "a trained bias on lora_B",
    "modules_to_save": "whole modules saved beside the adapter",
    "trainable_token_indices": "trained token embeddings",
    "target_parameters": "LoRA on bare parameters (MoE experts)",
    "layer_replication": "replicated layers",
    "alora_invocation_tokens": "activated LoRA (on only after its invocation tokens)",
    "use_qalora": "QALoRA",
    "use_bdlora": "block-diagonal LoRA",
    "arrow_config": "Arrow routing",
    "kasa_config": "KaSA",
    "velora_config": "VeLoRA",
    "monteclora_config": "MonteCLoRA",
    "megatron_config": "Megatron parallel layers",
}
#: ``init_lora_weights`` values that changed the base weights when the adapter was made:
#: merged into the original base, such an adapter is not the model it was trained as.
_BASE_CHANGING_INITS = ("pissa", "olora", "corda", "loftq")


class LoraAdapterError(MobiusError):
    """A LoRA adapter that cannot be merged: missing files, bad config values, bad tensors."""


@dataclass(frozen=True)
class LoraPair:
    """One adapted module: its ``lora_A`` ``[r, in]`` and ``lora_B`` ``[out, r]`` (lazy)."""

    module: str  # the module's name, peft's prefix removed
    a: Any
    b: Any


@dataclass(frozen=True)
class LoraAdapter:
    """A PEFT LoRA adapter read and checked by :meth:`read` (see the module docstring)."""

    directory: Path
    rank: int
    alpha: float
    use_rslora: bool
    fan_in_fan_out: bool
    target_modules: str | tuple[str, ...]
    exclude_modules: str | tuple[str, ...] = ()
    rank_pattern: dict[str, int] = field(default_factory=dict)
    alpha_pattern: dict[str, float] = field(default_factory=dict)
    pairs: dict[str, LoraPair] = field(default_factory=dict)

    @classmethod
    def read(cls, directory: str | Path) -> LoraAdapter:
        """The adapter in ``directory``: its config checked, its tensors paired (not read).

        Raises:
            LoraAdapterError: A file is missing, a config value has the wrong type or
                range or asks for a variant that is not merged, or a tensor is not a
                LoRA A/B weight of a targeted module.
        """
        directory = Path(directory)
        missing = [n for n in (ADAPTER_CONFIG, ADAPTER_WEIGHTS) if not (directory / n).is_file()]
        if missing:
            raise LoraAdapterError(f"LoRA adapter: {directory} has no {' and no '.join(missing)}")
        config = _read_config(directory / ADAPTER_CONFIG)
        try:
            tensors = SafetensorsCheckpoint.open(directory / ADAPTER_WEIGHTS)
        except CheckpointError as exc:
            raise LoraAdapterError(f"LoRA adapter: {exc}") from None
        adapter = cls(directory=directory, **_checked_fields(config, directory / ADAPTER_CONFIG))
        pairs = _pairs(tensors)
        for pair in pairs.values():
            adapter._check_pair(pair)
        return dataclasses.replace(adapter, pairs=pairs)

    def rank_of(self, module: str) -> int:
        """``r`` of ``module``: its ``rank_pattern`` entry, else the config's ``r``."""
        key = _pattern_key(self.rank_pattern, module)
        return self.rank if key is None else self.rank_pattern[key]

    def scale(self, module: str) -> float:
        """What ``B @ A`` is multiplied by for ``module``: ``alpha / r`` or ``alpha / sqrt(r)``."""
        key = _pattern_key(self.alpha_pattern, module)
        alpha = self.alpha if key is None else self.alpha_pattern[key]
        rank = self.rank_of(module)
        return alpha / math.sqrt(rank) if self.use_rslora else alpha / rank

    def targets(self, module: str) -> bool:
        """Whether peft would have adapted ``module`` (``target_modules``, ``exclude_modules``)."""
        if _matches(self.exclude_modules, module):
            return False
        if self.target_modules == "all-linear":
            return True  # peft expands it when it injects; the tensors say which
        return _matches(self.target_modules, module)

    def record(self) -> dict[str, Any]:
        """What a package built with this adapter merged keeps (:data:`MERGE_RECORD`)."""
        targets = self.target_modules
        return {
            "format": "peft-lora",
            "merged": True,
            "files": [ADAPTER_CONFIG, ADAPTER_WEIGHTS],
            "r": self.rank,
            "lora_alpha": self.alpha,
            "use_rslora": self.use_rslora,
            "target_modules": targets if isinstance(targets, str) else sorted(targets),
            "merged_modules": len(self.pairs),
        }

    def record_json(self) -> str:
        """:meth:`record` as the text of :data:`MERGE_RECORD`."""
        return json.dumps(self.record(), indent=2) + "\n"

    def _check_pair(self, pair: LoraPair) -> None:
        name = PEFT_PREFIX + pair.module
        if not self.targets(pair.module):
            raise LoraAdapterError(
                f"LoRA adapter tensor {name}{_A}: module {pair.module} is not one "
                "target_modules names (or exclude_modules excludes it)"
            )
        rank = self.rank_of(pair.module)
        for tensor, suffix, axis in ((pair.a, _A, 0), (pair.b, _B, 1)):
            if len(tensor.shape) != 2 or tensor.shape[axis] != rank:
                raise LoraAdapterError(
                    f"LoRA adapter tensor {name}{suffix} has shape {list(tensor.shape)}: "
                    f"not a linear layer's of rank {rank}"
                )
            if not tensor.dtype.is_floating_point():
                raise LoraAdapterError(f"LoRA adapter tensor {name}{suffix} is {tensor.dtype.name}")


def merge_lora(
    weights: Mapping[str, Any],
    adapter: LoraAdapter,
    *,
    renames: Mapping[str, str] | None = None,
    adapter_renames: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``weights`` with every weight the adapter adapts replaced by its merged value (lazy).

    ``weights`` maps checkpoint names to lazy tensors (a checkpoint, or what a model's
    ``sanitize`` returns). An adapter module ``M`` (peft's prefix removed, then
    ``adapter_renames`` applied) adapts the weight whose name, with ``renames`` applied,
    is ``M.weight`` with ``renames`` applied (module docstring). Nothing is read here.

    Raises:
        WeightMismatchError: An adapter module's weight is not in ``weights`` (named), two
            modules adapt one weight, or the product's shape is not the weight's.
    """
    renames, adapter_renames = dict(renames or {}), dict(adapter_renames or {})
    canonical: dict[str, str] = {}
    for name in weights:
        canonical.setdefault(_renamed(name, renames), name)
    merged = dict(weights)
    done: dict[str, str] = {}
    for module, pair in adapter.pairs.items():
        label = f"{PEFT_PREFIX}{module}{_A}"
        wanted = _renamed(_renamed(module, adapter_renames), renames) + ".weight"
        target = canonical.get(wanted)
        if target is None:
            raise WeightMismatchError(
                f"LoRA adapter tensor {label} adapts {wanted}, which the checkpoint does not hold"
            )
        if target in done:
            raise WeightMismatchError(
                f"LoRA adapter modules {done[target]} and {module} both adapt {target}"
            )
        done[target] = module
        base = weights[target]
        if not base.dtype.is_floating_point():
            raise WeightMismatchError(
                f"LoRA adapter tensor {label} adapts {target}, a {base.dtype.name} weight"
            )
        out, inputs = pair.b.shape[0], pair.a.shape[1]
        delta = (inputs, out) if adapter.fan_in_fan_out else (out, inputs)
        if tuple(base.shape) != delta:
            raise WeightMismatchError(
                f"LoRA adapter tensor {label} and its lora_B make {list(delta)}, but the "
                f"weight {target} is {list(base.shape)}"
            )
        scale = adapter.scale(module)
        merged[target] = DerivedTensor(
            _merger(base, pair, scale, adapter.fan_in_fan_out), base.shape, base.dtype
        )
    return merged


def read_adapters(directories) -> list[LoraAdapter]:
    """The adapters of ``mobius build --adapter`` (a directory or a list of them), each read.

    Raises:
        LoraAdapterError: A path is not a directory, two paths have one name (their
            ``.onnx_adapter`` files would collide), or an adapter is bad (:meth:`LoraAdapter.read`).
    """
    if isinstance(directories, (str, os.PathLike)):
        directories = [directories]
    adapters, names = [], set()
    for directory in directories:
        path = Path(directory).expanduser()
        if not path.is_dir():
            raise LoraAdapterError(f"LoRA adapter: {directory} is not a directory")
        name = adapter_name(path)
        if name in names:
            raise LoraAdapterError(f"LoRA adapter: two adapters are named {name!r}")
        names.add(name)
        adapters.append(LoraAdapter.read(path))
    if not adapters:
        raise LoraAdapterError("LoRA adapter: no adapter directory given")
    return adapters


def adapter_name(directory: Path) -> str:
    """An adapter's name: its directory's (resolved: ``.`` names the current one), checked
    to be a plain file name, for ``<name>.onnx_adapter``."""
    name = directory.resolve().name
    if not _PLAIN_NAME.fullmatch(name):
        raise LoraAdapterError(
            f"LoRA adapter: directory name {name!r} is not a plain name (letters, digits, . _ -)"
        )
    return name


def merge_record(adapters: list[LoraAdapter]) -> str:
    """The :data:`MERGE_RECORD` text of a build with ``adapters`` merged in turn."""
    if len(adapters) == 1:
        return adapters[0].record_json()
    records = [{**a.record(), "name": adapter_name(a.directory)} for a in adapters]
    return json.dumps({"format": "peft-lora", "merged": True, "adapters": records}, indent=2) + "\n"


def build_with_adapters(source, options, registry):
    """``mobius build --adapter``: ``source`` (a model directory's) built with ``options.adapters``.

    Merged (the default): each adapter is merged into the checkpoint in turn (two that
    adapt one weight both add to it), and the package keeps :data:`MERGE_RECORD`. A model
    class with ``merge_adapters_after_sanitize = True`` (its adapters name the modules of
    its converted layout, as transformers loads it) gets them merged into what its
    ``sanitize`` returns instead.

    ``options.adapter_inputs``: the base graph gets LoRA inputs on every module some
    adapter adapts (:mod:`mobius.components._lora`, names as onnxruntime-genai's model
    builder gives them, zero-rank defaults) and the package holds each adapter as
    ``<directory name>.onnx_adapter`` for onnxruntime-genai's ``Adapters``; adapters of
    different ranks share the graph. The adapter's module names must be the model's
    (identity: a text causal LM's ``model.layers.0.self_attn.q_proj``).

    Raises:
        LoraAdapterError: The source is not a model directory, or an adapter is bad or
            adapts a module the model has no plain Linear of.
    """
    from mobius.source import ModelSource

    if not isinstance(source, ModelSource) or source.checkpoint is None or source.prequantized:
        raise LoraAdapterError(
            f"--adapter applies to a model directory with float weights; {source.path} is not one"
        )
    if options.adapter_inputs and source.entry.task != "causal-lm":
        raise LoraAdapterError(
            f"--adapter-inputs applies to causal-lm models (onnxruntime-genai's multi-LoRA); "
            f"{source.entry.key} is a {source.entry.task} model: drop it to merge the adapters"
        )
    adapters = read_adapters(options.adapters)
    if not options.adapter_inputs and getattr(
        source.entry.module_class(), "merge_adapters_after_sanitize", False
    ):
        source.module_hooks.append(lambda module: _merge_after_sanitize(module, adapters))
        source.text_files[MERGE_RECORD] = merge_record(adapters)
        return source.build(options, registry)
    if not options.adapter_inputs:
        renames = getattr(source.entry.module_class(), "renames", None)
        checkpoint = source.checkpoint

        def merged():
            weights = checkpoint()
            for adapter in adapters:
                weights = merge_lora(weights, adapter, renames=renames)
            return weights

        source.checkpoint = merged
        source.text_files[MERGE_RECORD] = merge_record(adapters)
        return source.build(options, registry)
    modules = {module for adapter in adapters for module in adapter.pairs}
    source.module_hooks.append(lambda module: _attach(module, modules))
    package = source.build(options, registry)
    for adapter in adapters:
        name = adapter_name(adapter.directory) + ADAPTER_SUFFIX
        package.binary_files[name] = adapter_file(adapter, package.model.graph)
    return package


def _merge_after_sanitize(module, adapters: list[LoraAdapter]) -> None:
    """``module.sanitize`` followed by the merge of ``adapters`` (``renames`` the module's)."""
    sanitize, renames = module.sanitize, getattr(module, "renames", None)

    def merged(weights):
        weights = sanitize(weights)
        for adapter in adapters:
            weights = merge_lora(weights, adapter, renames=renames)
        return weights

    object.__setattr__(module, "sanitize", merged)  # this module only


def adapter_file(adapter: LoraAdapter, graph) -> bytes:
    """``adapter`` as an ``.onnx_adapter`` file (ONNX Runtime's ``AdapterFormat``) for
    ``graph``'s LoRA inputs: ``A`` transposed, ``B`` transposed times the scale, each in
    its input's dtype. Needs onnxruntime."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise MobiusError(
            "--adapter-inputs writes .onnx_adapter files with ONNX Runtime: "
            "pip install mobius-core[run]"
        ) from None
    from mobius.components._lora import lora_input_names

    keep, parameters = [], {}
    for module, pair in adapter.pairs.items():
        a = np.asarray(pair.a.numpy(), np.float32).T
        b = np.asarray(pair.b.numpy(), np.float32).T * np.float32(adapter.scale(module))
        for name, array in zip(lora_input_names(module), (a, b), strict=True):
            dtype = graph.initializers[name].dtype
            array = np.ascontiguousarray(array.astype(dtype.numpy()))
            if dtype == ir.DataType.BFLOAT16:
                array = array.view(np.uint16)  # ONNX Runtime takes bfloat16 as its bits
            keep.append(array)  # the OrtValue reads this array's memory until the export
            parameters[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array, dtype.value)
    writer = ort.AdapterFormat()
    writer.set_adapter_version(1)
    writer.set_model_version(1)
    writer.set_parameters(parameters)
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / ("adapter" + ADAPTER_SUFFIX)
        writer.export_adapter(str(path))
        return path.read_bytes()


def _attach(module, names: set[str]) -> None:
    from mobius.components._lora import attach_lora

    try:
        attach_lora(module, names)
    except KeyError as exc:
        raise LoraAdapterError(
            f"LoRA adapter module {exc.args[0]} is not a module of {type(module).__name__}"
        ) from None
    except TypeError as exc:
        raise LoraAdapterError(
            f"LoRA adapter module {exc}: --adapter-inputs adapts plain Linear layers"
        ) from None


def read_merge_record(package_dir: str | Path) -> dict[str, Any] | None:
    """A package's :data:`MERGE_RECORD` (checked to be a JSON object), or None without one."""
    from mobius.source import read_json

    path = Path(package_dir) / MERGE_RECORD
    if not path.is_file():
        return None
    record = read_json(path)
    if record.get("merged") is not True:
        raise MobiusError(f"{path} is not a merged-adapter record")
    return record


# -- internals ------------------------------------------------------------------------------


def _merger(base, pair: LoraPair, scale: float, fan_in_fan_out: bool):
    def merged() -> np.ndarray:
        a = np.asarray(pair.a.numpy(), np.float32)
        b = np.asarray(pair.b.numpy(), np.float32)
        delta = b @ a
        if fan_in_fan_out:
            delta = delta.T
        weight = np.asarray(base.numpy())
        return (weight.astype(np.float32) + np.float32(scale) * delta).astype(weight.dtype)

    return merged


def _renamed(name: str, renames: Mapping[str, str]) -> str:
    return next(iter(rename_prefixes({name: None}, renames))) if renames else name


def _read_config(path: Path) -> dict[str, Any]:
    from mobius.source import read_json

    try:
        return read_json(path)
    except MobiusError as exc:
        raise LoraAdapterError(f"LoRA adapter: {exc}") from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def _is_off(value: Any) -> bool:
    return value is None or value is False or value in ("", [], {})


def _checked_fields(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """The merge's settings from ``adapter_config.json``, every value's type and range checked."""

    def bad(name: str, why: str) -> LoraAdapterError:
        return LoraAdapterError(f"LoRA adapter: {path.name} {name} is {config.get(name)!r}: {why}")

    if config.get("peft_type") != "LORA":
        raise bad("peft_type", "not a LoRA adapter ('LORA')")
    for name, what in _REFUSED.items():
        if not _is_off(config.get(name)):
            raise bad(name, f"{what} is not merged by mobius")
    if config.get("bias", "none") != "none":
        raise bad("bias", "trained biases are not merged by mobius (only 'none')")
    init = config.get("init_lora_weights", True)
    if isinstance(init, str) and init.lower().startswith(_BASE_CHANGING_INITS):
        raise bad("init_lora_weights", "the adapter was made on changed base weights")
    rank = config.get("r")
    if not _is_int(rank) or rank < 1:
        raise bad("r", "not a positive int")
    alpha = config.get("lora_alpha")
    if not _is_number(alpha) or alpha <= 0:
        raise bad("lora_alpha", "not a positive number")
    flags = {}
    for name in ("use_rslora", "fan_in_fan_out"):
        flags[name] = config.get(name, False)
        if not isinstance(flags[name], bool):
            raise bad(name, "not true or false")
    targets = _modules(config, "target_modules", path)
    if not targets:
        raise bad("target_modules", "names no module")
    return dict(
        rank=rank,
        alpha=float(alpha),
        target_modules=targets,
        exclude_modules=_modules(config, "exclude_modules", path),
        rank_pattern=_pattern(config, "rank_pattern", path, lambda v: _is_int(v) and v >= 1),
        alpha_pattern=_pattern(config, "alpha_pattern", path, lambda v: _is_number(v) and v > 0),
        **flags,
    )


def _modules(config: dict, name: str, path: Path) -> str | tuple[str, ...]:
    """``target_modules`` / ``exclude_modules``: a regex (full match) or a list of names."""
    value = config.get(name)
    if value is None:
        return ()
    if isinstance(value, str):
        return _regex(value, f"{path.name} {name}")
    if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    raise LoraAdapterError(f"LoRA adapter: {path.name} {name} is {value!r}: not a regex or names")


def _pattern(config: dict, name: str, path: Path, valid) -> dict:
    value = config.get(name)
    value = {} if value is None else value
    if not isinstance(value, dict):
        raise LoraAdapterError(f"LoRA adapter: {path.name} {name} is {value!r}: not an object")
    for key, item in value.items():
        _regex(key, f"{path.name} {name} key")
        if not valid(item):
            raise LoraAdapterError(f"LoRA adapter: {path.name} {name}[{key!r}] is {item!r}")
    return dict(value)


def _regex(pattern: str, where: str) -> str:
    if len(pattern) > _MAX_PATTERN:
        raise LoraAdapterError(f"LoRA adapter: {where} is a {len(pattern)}-character pattern")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise LoraAdapterError(f"LoRA adapter: {where} {pattern!r} is not a regex: {exc}") from None
    return pattern


def _matches(modules: str | tuple[str, ...], module: str) -> bool:
    """peft's rule: a string is a regex matching the whole name; a list holds the name or a
    last part of it (``q_proj`` matches ``model.layers.0.self_attn.q_proj``)."""
    if isinstance(modules, str):
        return re.fullmatch(modules, module) is not None
    return any(module == m or module.endswith("." + m) for m in modules)


def _pattern_key(patterns: dict, module: str) -> str | None:
    """The first ``rank_pattern`` / ``alpha_pattern`` key matching ``module`` (peft's rule)."""
    return next((k for k in patterns if re.match(rf"(.*\.)?({k})$", module)), None)


def _pairs(tensors: Mapping[str, Any]) -> dict[str, LoraPair]:
    """The adapter's tensors as ``{module: LoraPair}``; any other tensor is an error."""
    halves: dict[str, dict[str, Any]] = {}
    for name, tensor in tensors.items():
        suffix = next((s for s in (_A, _B) if name.endswith(s)), None)
        if suffix is None or not name.startswith(PEFT_PREFIX):
            raise LoraAdapterError(
                f"LoRA adapter tensor {name} is not a {PEFT_PREFIX}*{_A} / {_B} weight "
                "(embedding LoRA, biases and saved modules are not merged by mobius)"
            )
        module = name[len(PEFT_PREFIX) : -len(suffix)]
        halves.setdefault(module, {})[suffix] = tensor
    pairs = {}
    for module, half in sorted(halves.items()):
        for suffix in (_A, _B):
            if suffix not in half:
                other = _B if suffix == _A else _A
                raise LoraAdapterError(
                    f"LoRA adapter tensor {PEFT_PREFIX}{module}{other} has no "
                    f"{PEFT_PREFIX}{module}{suffix}"
                )
        pairs[module] = LoraPair(module, half[_A], half[_B])
    if not pairs:
        raise LoraAdapterError("LoRA adapter: adapter_model.safetensors holds no tensor")
    return pairs
