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
# The other spellings users type (PyTorch's, numpy's, other exporters').
DTYPE_ALIASES = {
    "fp32": "f32",
    "float32": "f32",
    "float": "f32",
    "fp16": "f16",
    "float16": "f16",
    "half": "f16",
    "bfloat16": "bf16",
}


def canonical_dtype(name: str) -> str:
    """``"fp16"``, ``"float16"``, ``"half"``... as the name mobius uses (``"f16"``); others as given."""
    if not isinstance(name, str):
        return name
    return DTYPE_ALIASES.get(name.lower(), name.lower())


EXECUTION_PROVIDERS = ("default", "cpu", "cuda")
#: The ONNX opsets a build can target: the graphs are made at the first and converted
#: upwards. Opset 24 changes no meaning the graphs use (new types, Attention's optional
#: nonpad_kv_seqlen); opset 25's Attention computes otherwise in ONNX Runtime 1.32 with
#: no version adapter (a tiny Llama's logits came out 3.3 apart), so it is not offered.
OPSETS = (23, 24)
RUNTIMES = ("auto", "onnx", "ort-genai")
ENCODER_HEADS = (
    "none",
    "masked-lm",
    "sequence-classification",
    "token-classification",
    "sentence-embedding",
    "question-answering",
    "multiple-choice",
)
POOLING_MODES = ("mean", "cls", "max", "lasttoken")
QUANT_METHODS = ("int4", "int8", "none")
# How a block's scale and zero point are chosen (``--quant-method``), and which
# weights an int4 build keeps at 8 bits (``--quant-mix``); see mobius.passes.quantize_int4.
ROUNDING_METHODS = ("hqq", "rtn")
QUANT_MIXES = ("sensitive", "none")
# All 4-bit: the fastest decode (the sensitive mix is 20% slower on SmolLM2, below the
# genai builder's int4), and it still beats that builder's perplexity (49.6 vs 52.6).
DEFAULT_MIX = "none"

# Keyword spellings of the int4 settings, as QuantOptions fields.
_QUANT_KEYWORDS = {
    "block_size": "block_size",
    "symmetric": "symmetric",
    "accuracy_level": "accuracy_level",
    "quant_lm_head": "lm_head",
    "quant_embeddings": "embeddings",
    "requantize": "requantize",
    "quant_method": "rounding",
    "quant_mix": "mix",
}


@dataclass(frozen=True)
class QuantOptions:
    """Weight quantization: ``method="int4"`` stores MatMul weights as 4-bit blocks, ``"int8"`` as 8-bit.

    ``method=None`` (the default) keeps what the checkpoint is: a GGUF file's
    quantized blocks stay blocks, float weights stay float; ``"none"`` dequantizes
    everything to the build's float type. See :func:`mobius.passes.quantize_int4`
    for ``block_size``, ``symmetric`` and ``accuracy_level``; ``lm_head`` quantizes
    the output head too, ``embeddings`` the token embeddings
    (``GatherBlockQuantized``); ``requantize`` rounds a GGUF file's blocks again
    instead of keeping them. ``accuracy_level`` 4 (int8 activations, as llama.cpp
    computes its block dot products) is ONNX Runtime's fast CPU path; 0 computes
    in the activations' own type: a GGUF file's numbers exactly, several times
    slower (8-bit blocks: over 20 times).

    ``rounding`` picks each block's scale and zero point: ``"rtn"`` rounds to
    nearest from the block's extremes, ``"hqq"`` refits them to lower the block's
    error (about twice the build time). ``symmetric`` None: a zero point per block
    for int4 (asymmetric), none for int8. ``mix`` (int4 only): ``"sensitive"``
    keeps the weights 4 bits hurt most at 8 bits, as llama.cpp's Q4_K_M gives
    them more bits; ``"none"`` makes every weight 4-bit; None: :data:`DEFAULT_MIX`.
    Measured on SmolLM2-135M (``benchmarks/perplexity.py``): asymmetric blocks and
    the sensitive mix each cut int4's loss of perplexity most, but the mix decodes
    20% slower (below the genai builder), so the default is asymmetric, all 4-bit;
    hqq helps 4-bit-only builds a little, for twice the build time.
    """

    method: str | None = None
    block_size: int = 32
    symmetric: bool | None = None
    accuracy_level: int = 4
    lm_head: bool = True
    embeddings: bool = False
    requantize: bool = False
    rounding: str = "rtn"
    mix: str | None = None

    def resolved(self) -> dict[str, Any]:
        """``bits``, ``method``, ``symmetric`` and ``mix`` for the int4 pass, defaults filled."""
        bits = 8 if self.method == "int8" else 4
        symmetric = bits == 8 if self.symmetric is None else self.symmetric
        mix = (self.mix or DEFAULT_MIX) if bits == 4 else "none"
        return {"bits": bits, "method": self.rounding, "symmetric": symmetric, "mix": mix}


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
    - ``opset``: the ONNX opset of the graphs (:data:`OPSETS`); None is the first.
    - ``adapters``: PEFT LoRA adapter directories, merged into the weights
      (:func:`mobius.lora.build_with_adapters`); with ``adapter_inputs``, kept apart
      instead: LoRA graph inputs and one ``.onnx_adapter`` file each (onnxruntime-genai
      multi-LoRA). Not with quantization (``adapter_inputs``) or without weights.
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
    opset: int | None = None
    adapters: tuple[str, ...] = ()
    adapter_inputs: bool = False
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
            elif name == "dtype":
                fields[name] = canonical_dtype(value)
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
        if self.quant.method not in (None, *QUANT_METHODS):
            raise MobiusError(
                f"unknown quantization {self.quant.method!r}; choose {', '.join(QUANT_METHODS)}"
            )
        if self.quant.method not in (None, "none") and not self.load_weights:
            raise MobiusError("quantization needs the weights; drop --no-weights")
        if self.quant.rounding not in ROUNDING_METHODS:
            raise MobiusError(
                f"unknown quantization method {self.quant.rounding!r}; "
                f"choose {', '.join(ROUNDING_METHODS)}"
            )
        if self.quant.mix not in (None, *QUANT_MIXES):
            raise MobiusError(
                f"unknown quantization mix {self.quant.mix!r}; choose {', '.join(QUANT_MIXES)}"
            )
        if self.quant.mix is not None and self.quant.method != "int4":
            raise MobiusError("--quant-mix applies to --quant int4 only")
        if self.quant.requantize and self.quant.method not in ("int4", "int8"):
            raise MobiusError(
                "--requantize rounds a file's blocks again for --quant int4 or int8 only"
            )
        if self.opset is not None and self.opset not in OPSETS:
            raise MobiusError(
                f"opset {self.opset} is not one mobius writes: choose {', '.join(map(str, OPSETS))} "
                "(the graphs use Attention, RotaryEmbedding and RMSNormalization, which ONNX "
                "defines from opset 23)"
            )
        self._check_adapters()
        if self.pooling is not None and self.pooling not in POOLING_MODES:
            raise MobiusError(
                f"unknown pooling {self.pooling!r}; choose {', '.join(POOLING_MODES)}"
            )

    def _check_adapters(self) -> None:
        if not isinstance(self.adapter_inputs, bool):
            raise MobiusError(f"adapter_inputs is {self.adapter_inputs!r}, not true or false")
        if self.adapter_inputs and not self.adapters:
            raise MobiusError("--adapter-inputs needs the adapters: give --adapter PEFT_DIR")
        if not self.adapters:
            return
        if not self.load_weights:
            raise MobiusError("--adapter needs the weights; drop --no-weights")
        if self.adapter_inputs and self.quant.method not in (None, "none"):
            raise MobiusError(
                "--adapter-inputs with --quant: quantized builds take merged adapters only "
                "(drop --adapter-inputs)"
            )
