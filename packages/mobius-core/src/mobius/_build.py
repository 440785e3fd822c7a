"""One build: a model id, directory or file → its :class:`~mobius.source.Source` → the package.

:func:`build` is what ``mobius build`` runs, so the API and the CLI write the same
files: the options (:class:`~mobius.options.BuildOptions`) are checked, the model
resolved (hub snapshot, local directory or file), its source recognised
(:func:`mobius.source.open_source`) and built, and then the package finished:
without weights, the parameters become graph inputs; with onnxruntime-genai's
generator able to run it (``runtime``), ``genai_config.json`` is added. What the
build read (the weight files, noted by the readers) and was asked goes into the
package's record, which :meth:`~mobius.ModelPackage.save` writes as ``mobius.json``
(:mod:`mobius._record`).

:meth:`mobius.source.ModelSource.build` is the build of one model: config →
module tree → graphs for the task → weights → the passes of each stage
(:mod:`mobius.passes`).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import onnx_ir as ir

from mobius._graphs import cast_parameters, parse_dtype
from mobius._package import ModelPackage
from mobius._record import PARAMETER_META, describe_build
from mobius._registry import registry as default_registry
from mobius.errors import MobiusError
from mobius.options import BuildOptions
from mobius.passes._stages import run_stage
from mobius.source import open_source
from mobius.weights import parameters, resolve_model
from mobius.weights._tracking import track_reads

logger = logging.getLogger("mobius")


def build_from_module(
    module,
    task: str = "causal-lm",
    config: Any = None,
    dtype: ir.DataType | str = "f32",
    ep: str = "default",
    registry=None,
) -> ModelPackage:
    """Build the graphs of a module tree for ``task``; parameters are left for :func:`apply_weights`.

    ``ep="cpu"`` or ``"cuda"`` uses ONNX Runtime's fused ops (GroupQueryAttention,
    SkipSimplifiedLayerNormalization...); ``"default"`` keeps to standard ONNX.
    """
    dtype = parse_dtype(dtype)
    config = config if config is not None else getattr(module, "config", None)
    cast_parameters(module, dtype)
    models = (registry or default_registry).task(task, ep=ep).build(module, config, dtype)
    run_stage("graph", models.values(), BuildOptions(ep=ep))
    return ModelPackage(models=models, config=config, task=task)


def build(
    model: str | os.PathLike,
    options: BuildOptions | None = None,
    *,
    registry=None,
    **keywords: Any,
) -> ModelPackage:
    """Build the ONNX package of a HuggingFace model id, local directory or file.

    ``options`` is a :class:`~mobius.options.BuildOptions`; keywords set its fields
    (``dtype="f16"``, ``ep="cpu"``, ``load_weights=False``, ``quant="int4"`` with
    ``block_size``..., and options that domain packages register, such as a
    vision–language ``form``): see :meth:`BuildOptions.of`. What the package
    holds is exactly what ``mobius build`` writes with the same options.

    Raises:
        MobiusError: a subclass for each kind of bad input (see :mod:`mobius.errors`).
    """
    options = BuildOptions.of(options, **keywords)
    options.check()
    registry = registry or default_registry
    path = resolve_model(
        model, revision=options.revision, allow_pickle=options.allow_pickle, registry=registry
    )
    with track_reads() as files:
        source = open_source(path, options, registry)
        if options.adapters:
            from mobius.lora import build_with_adapters

            package = build_with_adapters(source, options, registry)
        else:
            package = source.build(options, registry)
    describe_build(package, model, path, options, registry, files)
    package.source_path = path
    if not options.load_weights:
        _parameters_as_inputs(package)
    _add_genai_config(package, options, registry)
    if options.opset is not None:
        convert_opset(package, options.opset)
    return package


def convert_opset(package: ModelPackage, opset: int) -> None:
    """Raise every graph of ``package`` to ONNX ``opset`` (onnxscript's version converter)."""
    from onnxscript.version_converter import ConvertVersionPass

    for model in package.models.values():
        if model.opset_imports.get("") != opset:
            ConvertVersionPass(opset)(model)


def _parameters_as_inputs(package: ModelPackage) -> None:
    """Without weights, parameters become graph inputs so each graph stays valid ONNX."""
    for model in package.models.values():
        for value in parameters(model).values():
            model.graph.initializers.pop(value.name)
            value.meta[PARAMETER_META] = True  # not part of the I/O contract the record lists
            model.graph.inputs.append(value)


def _add_genai_config(package: ModelPackage, options: BuildOptions, registry) -> None:
    """``genai_config.json`` as ``options.runtime`` asks, from the task that made the package.

    ``auto`` writes it for a package with weights whose task the generator runs and
    notes why not otherwise; ``ort-genai`` insists (its refusal is the build's
    error); ``onnx`` never writes it.
    """
    from mobius.genai import FILENAME, GenAIUnsupportedError

    if options.runtime == "onnx" or (options.runtime == "auto" and not options.load_weights):
        return
    try:
        task = registry.task(package.task, ep=options.ep)
    except MobiusError:  # a package of several models (a pipeline) has no task of its own
        if options.runtime == "ort-genai":
            raise GenAIUnsupportedError(
                f"onnxruntime-genai's generator does not run {package.task} packages"
            ) from None
        return
    if options.runtime == "auto" and not task.genai:
        return  # not a task the generator runs: nothing to note
    try:
        config = task.genai_config(package)
    except GenAIUnsupportedError as exc:
        if options.runtime == "ort-genai":
            raise
        logger.warning("no genai_config.json: %s", exc)
        return
    package.text_files[FILENAME] = json.dumps(config, indent=4) + "\n"
