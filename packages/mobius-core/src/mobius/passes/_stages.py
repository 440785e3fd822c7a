"""The passes of a build, declared once and run by stage.

- ``graph``: right after the task made the graphs (before any weight is read);
- ``weights``: after the weights are applied (passes that read or repack them);
- ``quantize``: last, when the build quantizes.

Each :class:`Pass` says when it applies to a build's options; :func:`run_stage`
runs a stage's passes over every graph of a package in the order declared here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mobius.passes._fusion import fuse_for_runtime, pack_parallel_matmuls, pack_qkv, unflatten_head
from mobius.passes._int4_pass import quantize_int4

STAGES = ("graph", "weights", "quantize")


@dataclass(frozen=True)
class Pass:
    """One graph pass: its stage, when it applies, and what it does to one graph.

    ``run(model, options, weights)`` gets the build's
    :class:`~mobius.options.BuildOptions` and the checkpoint tensors by name (None
    when no weights are loaded).
    """

    name: str
    stage: str
    applies: Callable[[Any], bool]
    run: Callable[[Any, Any, Any], object]


def _fused(options) -> bool:
    return options.ep != "default"


def _int4(model, options, weights) -> None:
    quant = options.quant
    quantize_int4(
        model,
        block_size=quant.block_size,
        accuracy_level=quant.accuracy_level,
        lm_head=quant.lm_head,
        embeddings=quant.embeddings,
        # GGUF blocks are kept as they are, not re-rounded, unless asked.
        prequantized=weights,
        requantize=quant.requantize,
        **quant.resolved(),  # bits, method, symmetric, mix
    )


def _keep_blocks(model, options, weights) -> None:
    """A GGUF build's default: its quantized blocks stay blocks, its float tensors floats."""
    if weights is not None and quantize_int4(
        model, accuracy_level=options.quant.accuracy_level, prequantized=weights, rtn=False
    ):
        unflatten_head(model)


PASSES: tuple[Pass, ...] = (
    Pass("fuse-for-runtime", "graph", _fused, lambda m, o, w: fuse_for_runtime(m, o.ep)),
    # q|k|v first: attention then takes them packed, with no Split.
    Pass("pack-qkv", "weights", _fused, lambda m, o, w: pack_qkv(m)),
    Pass("pack-parallel-matmuls", "weights", _fused, lambda m, o, w: pack_parallel_matmuls(m)),
    Pass("int4", "quantize", lambda o: o.quant.method in ("int4", "int8"), _int4),
    Pass("keep-blocks", "quantize", lambda o: o.quant.method is None, _keep_blocks),
    Pass(
        "unflatten-head",
        "quantize",
        lambda o: o.quant.method in ("int4", "int8"),
        lambda m, o, w: unflatten_head(m),
    ),
)


def run_stage(stage: str, models, options, weights=None) -> None:
    """Run the passes of ``stage`` that apply to ``options`` over each graph in ``models``."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
    for graph_pass in PASSES:
        if graph_pass.stage == stage and graph_pass.applies(options):
            for model in models:
                graph_pass.run(model, options, weights)
