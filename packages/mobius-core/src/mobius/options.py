"""The options of one build: what ``mobius build`` flags and :func:`mobius.build` keywords set.

Plain dataclasses, importable without anything heavy. :meth:`BuildOptions.of`
reads the keyword form (``mobius.build(path, dtype="f16", quant="int4", form="single")``):
the fields here, the int4 shorthands (``block_size``, ``symmetric``,
``accuracy_level``, ``quant_lm_head``, ``quant_embeddings``), and any option a
domain package registers (:class:`mobius.plugins.CliOption`), kept in
:attr:`BuildOptions.plugin`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mobius.errors import MobiusError

DTYPE_NAMES = ("f32", "f16", "bf16")
EXECUTION_PROVIDERS = ("default", "cpu", "cuda")
RUNTIMES = ("auto", "onnx", "ort-genai")
ENCODER_HEADS = (
    "none",
    "masked-lm",
    "sequence-classification",
    "token-classification",
    "sentence-embedding",
)
POOLING_MODES = ("mean", "cls", "max")

# Keyword spellings of the int4 settings, as QuantOptions fields.
_QUANT_KEYWORDS = {
    "block_size": "block_size",
    "symmetric": "symmetric",
    "accuracy_level": "accuracy_level",
    "quant_lm_head": "lm_head",
    "quant_embeddings": "embeddings",
}


@dataclass(frozen=True)
class QuantOptions:
    """Weight quantization: ``method="int4"`` stores MatMul weights as 4-bit blocks.

    See :func:`mobius.passes.quantize_int4` for ``block_size``, ``symmetric`` and
    ``accuracy_level``; ``lm_head`` quantizes the output head too, ``embeddings``
    the token embeddings (``GatherBlockQuantized``).
    """

    method: str | None = None
    block_size: int = 32
    symmetric: bool = True
    accuracy_level: int = 4
    lm_head: bool = True
    embeddings: bool = False


@dataclass(frozen=True)
class BuildOptions:
    """Everything a build may be asked, with the defaults ``mobius build`` uses.

    - ``dtype``: ``"f32" | "f16" | "bf16"``, or None for the checkpoint's own type.
    - ``ep``: ``"default"`` (portable ONNX) or ``"cpu"`` / ``"cuda"`` (ONNX Runtime's
      fused contrib ops).
    - ``load_weights``: False builds the graphs alone; their parameters become graph
      inputs, so each graph stays valid ONNX.
    - ``runtime``: ``"auto"`` writes ``genai_config.json`` when onnxruntime-genai's
      generator can run the package, ``"ort-genai"`` insists, ``"onnx"`` never does.
    - ``revision``: a hub revision; ``allow_pickle``: read pickled PyTorch weights
      with mobius's restricted unpickler.
    - ``model_type``: build a directory as this registry key instead of its config's.
    - ``head``, ``pooling``, ``normalize``: the outputs of an encoder build (the
      feature-extraction contract) or a classifier; ``"auto"`` follows the checkpoint.
    - ``quant``: :class:`QuantOptions`.
    - ``plugin``: options registered by domain packages, by their ``dest``.
    """

    dtype: str | None = None
    ep: str = "default"
    load_weights: bool = True
    runtime: str = "auto"
    revision: str | None = None
    allow_pickle: bool = False
    model_type: str | None = None
    head: str = "auto"
    pooling: str | None = None
    normalize: bool | None = None
    quant: QuantOptions = field(default_factory=QuantOptions)
    plugin: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, options: BuildOptions | None = None, **keywords: Any) -> BuildOptions:
        """``options`` (or the defaults) with ``keywords`` applied; see the module doc."""
        options = options or cls()
        names = {f.name for f in dataclasses.fields(cls)}
        fields: dict[str, Any] = {}
        quant: dict[str, Any] = {}
        plugin = dict(options.plugin)
        for name, value in keywords.items():
            if name == "quant" and not isinstance(value, QuantOptions):
                quant["method"] = value
            elif name in _QUANT_KEYWORDS:
                quant[_QUANT_KEYWORDS[name]] = value
            elif name == "plugin":
                plugin.update(value)
            elif name in names:
                fields[name] = value
            else:
                plugin[name] = value  # checked against the registered options by the build
        if quant:
            fields["quant"] = dataclasses.replace(fields.get("quant", options.quant), **quant)
        return dataclasses.replace(options, **fields, plugin=plugin)

    def check(self) -> None:
        """Refuse values no build takes (before anything is read or downloaded)."""
        if self.dtype is not None and not isinstance(self.dtype, str):
            return  # an ir.DataType from Python callers: checked when parsed
        if self.dtype is not None and self.dtype not in DTYPE_NAMES:
            raise MobiusError(
                f"unknown dtype {self.dtype!r}; choose one of {', '.join(DTYPE_NAMES)}"
            )
        if self.ep not in EXECUTION_PROVIDERS:
            raise MobiusError(
                f"unknown execution provider {self.ep!r}; choose {', '.join(EXECUTION_PROVIDERS)}"
            )
        if self.runtime not in RUNTIMES:
            raise MobiusError(f"unknown runtime {self.runtime!r}; choose {', '.join(RUNTIMES)}")
        if self.quant.method not in (None, "int4"):
            raise MobiusError(f"unknown quantization {self.quant.method!r}; choose int4")
        if self.quant.method and not self.load_weights:
            raise MobiusError("quantization needs the weights; drop --no-weights")
        if self.pooling is not None and self.pooling not in POOLING_MODES:
            raise MobiusError(
                f"unknown pooling {self.pooling!r}; choose {', '.join(POOLING_MODES)}"
            )
