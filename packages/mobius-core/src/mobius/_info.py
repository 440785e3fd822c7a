"""``mobius info``: what a model is and which build options apply to it, without its weights.

Everything is read from the config (a hub id fetches ``config.json`` and
``generation_config.json`` only) and from graphs built without weights, so the
answers are those a real build would give: the parameter count is the built
graph's, fused ops are those the ``--ep cpu`` build contains, ort-genai support is
what :func:`mobius.genai.genai_config` accepts, and the int4 size comes from
running the int4 pass itself on placeholder weights that are never read.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import onnx_ir as ir

from mobius.errors import MobiusError

# config.json spellings of a checkpoint's dtype, to the names --dtype takes.
_CONFIG_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
INT4_BLOCK_SIZE = 32


@dataclass
class OptionInfo:
    """Whether a build option applies to the model, and what it does for it."""

    applies: bool
    detail: str


@dataclass
class ModelInfo:
    """What ``mobius info`` reports; :meth:`as_dict` is its ``--json`` form.

    ``sizes`` are bytes of the weights as a build stores them: ``f32``, ``f16``,
    ``bf16``; ``int4``: MatMul weights in 4-bit blocks of 32 with f16 scales, the
    other weights in f16; ``int4_f32``: the same with f32 scales and other weights.
    """

    source: str
    model_type: str
    package: str
    module: str
    task: str
    verified: bool | None
    checkpoint_dtype: str | None
    parameters: int
    sizes: dict[str, int] = field(default_factory=dict)
    options: dict[str, OptionInfo] = field(default_factory=dict)
    #: A GGUF file's tensors by stored type: ``tensors``, ``bytes`` and ``build``,
    #: what a default build does with them.
    tensor_types: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: What a build makes, from the source recogniser that knows the directory's kind
    #: (:attr:`mobius.plugins.SourceInfo.describe`): graphs, parts an option selects.
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)


def _numel(value: ir.Value) -> int:
    return math.prod(int(d) for d in value.shape)


def _never_loaded() -> ir.TensorProtocol:
    raise RuntimeError("mobius info builds have no weights to read")


def _weightless_build(source, ep: str, registry):
    """The weightless f32 graphs of a model source, as ``mobius build --ep EP`` makes them."""
    from mobius.options import BuildOptions

    # A fresh module tree per build: building registers its parameters in the graph.
    return source.build(BuildOptions(dtype="f32", ep=ep, load_weights=False), registry)


def _parameter_elements(package) -> tuple[int, int, int]:
    """(parameters, float elements, bytes of the others) over the package's graphs.

    A parameter that several graphs hold under one name is one checkpoint tensor:
    it is counted once.
    """
    from mobius.weights import parameters

    seen: dict[str, ir.Value] = {}
    for model in package.models.values():
        for name, value in parameters(model).items():
            seen.setdefault(name, value)
    floats = sum(_numel(v) for v in seen.values() if v.dtype.is_floating_point())
    other = sum(
        int(_numel(v) * v.dtype.itemsize) for v in seen.values() if not v.dtype.is_floating_point()
    )
    count = sum(_numel(v) for v in seen.values())
    return count, floats, other


def _int4_sizes(package) -> tuple[int, int, int]:
    """(MatMul weights quantized, bytes with f16 floats, bytes with f32 floats) after ``--quant int4``.

    The real pass runs on the weightless graphs: each parameter gets a placeholder
    tensor of its shape that is never read (the pass only registers lazy values).
    """
    from mobius.options import QuantOptions
    from mobius.passes import quantize_int4
    from mobius.weights import parameters

    replaced, packed_bytes, float_elements = 0, 0, 0
    for model in package.models.values():
        params = parameters(model)
        for value in params.values():
            value.const_value = ir.LazyTensor(_never_loaded, value.dtype, value.shape)
        before = set(model.graph.initializers)
        # What `--quant int4` builds by default (QuantOptions' defaults, filled in).
        int4 = QuantOptions(method="int4").resolved()
        replaced += quantize_int4(model, block_size=INT4_BLOCK_SIZE, **int4)
        for name, value in model.graph.initializers.items():
            if name not in params and name in before:
                continue  # constants of the graph itself, not weights
            if value.dtype.is_floating_point():
                float_elements += _numel(value)
            else:
                packed_bytes += int(_numel(value) * value.dtype.itemsize)
    return replaced, packed_bytes + 2 * float_elements, packed_bytes + 4 * float_elements


def _runtime_options(package, registry) -> dict[str, OptionInfo]:
    """``--ep cpu`` and ``--runtime ort-genai``, from a weightless ``--ep cpu`` build."""
    from mobius.components._runtime import MS_DOMAIN
    from mobius.genai import GenAIUnsupportedError

    fused = Counter(
        node.op_type
        for model in package.models.values()
        for node in model.graph
        if node.domain == MS_DOMAIN
    )
    attention = fused.get("GroupQueryAttention", 0)
    ops = ", ".join(f"{op} x{n}" for op, n in sorted(fused.items()))
    if attention:
        ep = OptionInfo(True, f"fused attention (GroupQueryAttention); fused ops: {ops}")
    elif fused:
        ep = OptionInfo(True, f"no fused attention for this family; fused ops: {ops}")
    else:
        ep = OptionInfo(False, "no fused ops for this family: the graph stays standard ONNX")
    try:
        genai = registry.task(package.task, ep="cpu").genai_config(package)
        runtime = OptionInfo(True, f"supported (generator model type {genai['model']['type']!r})")
    except GenAIUnsupportedError as exc:
        runtime = OptionInfo(False, f"not supported: {exc}")
    return {"--ep cpu|cuda": ep, "--runtime ort-genai": runtime}


def model_info(model: str, *, revision: str | None = None, registry=None) -> ModelInfo:
    """Describe ``model`` (hub id, directory with config.json, or ``.gguf`` file) without weights.

    Builds the ``--ep cpu`` graphs once, without weights: seconds for a 70B dense
    configuration, minutes for a large MoE (every expert is a subgraph). Raises :class:`~mobius.errors.MobiusError`
    subclasses for an unusable source or an unknown model type.
    """
    from mobius._registry import registry as default_registry
    from mobius.options import BuildOptions
    from mobius.source import ModelSource, open_source
    from mobius.weights._resolve import resolve_config

    registry = registry or default_registry
    path = resolve_config(model, revision=revision)
    description = _description(path, registry)
    options = BuildOptions(load_weights=False, plugin=description.plugin)
    source = open_source(path, options, registry)
    if not isinstance(source, ModelSource):
        raise MobiusError(
            f"{path} holds several models: mobius info describes one; give one of its "
            "model directories"
        )
    entry = source.entry

    # One weightless --ep cpu build answers everything: fusion does not change the
    # parameters (q/k/v are packed only once weights exist), and a build is the cost.
    try:
        package = _weightless_build(source, "cpu", registry)
        runtime = _runtime_options(package, registry)  # before int4 adds its contrib ops
    except Exception as exc:  # shown as the options' answer: the rest of the report holds
        failed = OptionInfo(False, f"the --ep cpu build fails: {type(exc).__name__}: {exc}")
        runtime = {"--ep cpu|cuda": failed, "--runtime ort-genai": failed}
        package = _weightless_build(source, "default", registry)
    count, floats, other = _parameter_elements(package)
    quantized, int4_f16, int4_f32 = _int4_sizes(package)
    sizes = {
        "f32": 4 * floats + other,
        "f16": 2 * floats + other,
        "bf16": 2 * floats + other,
        "int4": int4_f16,
        "int4_f32": int4_f32,
    }

    own = _CONFIG_DTYPES.get(source.stored_dtype or "")
    default = f"the checkpoint's own, {own}" if own else "the checkpoint's own"
    options = {
        "--dtype": OptionInfo(True, f"f32, f16 or bf16 (default: {default})"),
        **runtime,
    }
    if quantized:
        note = (
            "quantized blocks are kept as they are"
            if source.prequantized
            else "RTN, a zero point per block of 32"
        )
        options["--quant int4"] = OptionInfo(
            True, f"{quantized} MatMul weights to MatMulNBits ({note})"
        )
    else:
        options["--quant int4"] = OptionInfo(False, "no MatMul by a 2-D weight to quantize")
    return ModelInfo(
        source=str(path),
        model_type=entry.key,
        package=entry.package,
        module=entry.module_class().__name__,
        task=entry.task,
        verified=registry.is_verified(entry.key),
        checkpoint_dtype=source.stored_dtype,
        parameters=count,
        sizes=sizes,
        options=options,
        tensor_types=_tensor_types(source.tensor_types),
        notes=list(description.notes),
    )


def _description(path, registry):
    """The first registered source's description of ``path`` (empty when none knows it)."""
    from mobius.plugins import SourceDescription, load

    for info in registry.sources():
        if info.describe is not None:
            description = load(info.describe)(path, registry)
            if description is not None:
                return description
    return SourceDescription()


def _tensor_types(types: dict[str, dict[str, int]]) -> dict[str, dict[str, Any]]:
    """``source.tensor_types`` with what a default build does with each type."""
    from mobius.weights._gguf_quant import KEPT_AS

    rows = {}
    for name, row in sorted(types.items(), key=lambda item: -item[1]["bytes"]):
        if name not in KEPT_AS:
            action = "stays float" if name.startswith(("F", "BF")) else "stays as stored"
        elif row["kept"] == row["tensors"]:
            action = f"kept: {KEPT_AS[name]}"
        else:
            others = row["tensors"] - row["kept"]
            action = f"kept: {KEPT_AS[name]}; {others} (not 2-D) dequantized to float"
        rows[name] = {"tensors": row["tensors"], "bytes": row["bytes"], "build": action}
    return rows


def _bytes(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _count(n: int) -> str:
    for suffix, scale in (("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale:
            return f"{n:,} ({n / scale:.2f}{suffix})"
    return f"{n:,}"


def format_info(info: ModelInfo) -> str:
    """The readable, aligned block that ``mobius info`` prints."""
    if info.verified is None:
        verified = f"unknown ({info.package} publishes no verified list)"
    elif info.verified:
        verified = f"yes: passed {info.package}'s parity tests"
    else:
        verified = f"no: registered, not (yet) verified by {info.package}'s parity tests"
    rows = [
        ("source", info.source),
        ("model type", info.model_type),
        ("registered by", f"{info.package} ({info.module})"),
        ("task", info.task),
        *(("builds" if i == 0 else "", note) for i, note in enumerate(info.notes)),
        ("verified", verified),
        ("checkpoint dtype", info.checkpoint_dtype or "not stated"),
        ("parameters", _count(info.parameters)),
        ("size f32", _bytes(info.sizes["f32"])),
        ("size f16/bf16", _bytes(info.sizes["f16"])),
        (
            "size int4",
            f"{_bytes(info.sizes['int4'])} (blocks of {INT4_BLOCK_SIZE} with zero points, f16 "
            f"scales and other weights; {_bytes(info.sizes['int4_f32'])} with f32)",
        ),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    if info.tensor_types:
        lines.append("stored tensors")
        type_width = max(len(name) for name in info.tensor_types)
        for name, row in info.tensor_types.items():
            count = f"{row['tensors']} tensor" + ("s" if row["tensors"] != 1 else "")
            size = f"{count}, {_bytes(row['bytes'])}"
            lines.append(f"  {name:<{type_width}}  {size:<22}  {row['build']}")
    lines.append("build options")
    opt_width = max(len(name) for name in info.options)
    for name, option in info.options.items():
        mark = "yes" if option.applies else "no "
        lines.append(f"  {name:<{opt_width}}  {mark}  {option.detail}")
    return "\n".join(lines)
