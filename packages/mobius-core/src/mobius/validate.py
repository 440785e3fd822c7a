"""``mobius build --validate``: a built package against its source model on a fixed sample input.

The reference is the source as its own library reads it (transformers'
``from_pretrained`` with ``trust_remote_code=False``, in float32), never mobius's
reading of the config: a config field the build misreads shows up as a difference.
Each task names its validator when it registers (:attr:`mobius.plugins.TaskInfo.validate`):
``validate(package_dir, source, record, reference) -> ValidationReport``, where
``record`` is the package's ``mobius.json`` and ``reference`` says whether torch
and transformers are importable. Without them a validator runs a smoke inference
of the graphs on the same sample input (every output finite) and says so.

Tolerances: the max abs difference of the compared outputs must not exceed
``atol``. Its default depends on the build: :data:`DEFAULT_ATOL` for float builds
(an f16 or bf16 graph is compared with the float32 reference, so its rounding
counts); a quantized build is reported without a default tolerance (its error is
the quantization's): give ``--atol`` to gate it. Greedy tokens must agree for a
float32 build; at lower precision a near tie may flip, so disagreement is reported.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mobius.errors import MobiusError

#: The default ``--atol`` of a float build, by its dtype.
DEFAULT_ATOL = {"f32": 1e-3, "f16": 0.25, "bf16": 2.0}

#: Ops that store weights below float precision: a build holding them is quantized.
QUANTIZED_OPS = frozenset(
    {"MatMulNBits", "GatherBlockQuantized", "DequantizeLinear", "MatMulInteger", "QLinearMatMul"}
)

#: The sample batch of text tasks: two prompts of these lengths (the second padded).
SAMPLE_LENGTHS = (7, 4)
#: Greedy decode steps after the prefill, for generative tasks.
SAMPLE_DECODE_STEPS = 4


@dataclass
class ValidationReport:
    """What ``--validate`` compared and measured.

    ``reference`` names what the graphs were compared with (None: a smoke run,
    nothing to compare with); ``diffs`` holds the max abs difference per compared
    output; ``tokens_agree`` whether the greedy tokens of both agree (None where
    the task has no tokens).
    """

    task: str
    reference: str | None
    checked: str
    diffs: dict[str, float] = field(default_factory=dict)
    tokens_agree: bool | None = None
    atol: float | None = None
    tokens_required: bool = True
    note: str = ""

    @property
    def max_abs_diff(self) -> float | None:
        return max(self.diffs.values()) if self.diffs else None

    def failures(self) -> list[str]:
        """Why the package fails validation; empty when it passes."""
        found = [f"{name} is not finite" for name, d in self.diffs.items() if not math.isfinite(d)]
        if self.reference is None:  # a smoke run has nothing to compare with
            return found
        worst = self.max_abs_diff
        if self.atol is not None and worst is not None and worst > self.atol:
            found.append(f"max abs diff {worst:.3g} > atol {self.atol:g}")
        if self.tokens_agree is False and self.tokens_required:
            found.append("greedy tokens differ from the reference")
        return found

    @property
    def passed(self) -> bool:
        return not self.failures()

    def summary(self) -> str:
        """A few lines for the terminal."""
        if self.reference is None:
            verdict = "outputs finite" if self.passed else "FAILED: " + "; ".join(self.failures())
            lines = [f"validate: smoke inference on {self.checked}: {verdict}"]
        else:
            diffs = ", ".join(f"{name} {d:.3g}" for name, d in self.diffs.items())
            lines = [
                f"validate: against {self.reference} on {self.checked}",
                f"  max abs diff: {diffs}",
            ]
            if self.tokens_agree is not None:
                lines.append(f"  greedy tokens: {'same' if self.tokens_agree else 'DIFFERENT'}")
            tolerance = (
                f"atol {self.atol:g}" if self.atol is not None else "no tolerance (quantized)"
            )
            verdict = "passed" if self.passed else "FAILED: " + "; ".join(self.failures())
            lines.append(f"  {verdict} ({tolerance})")
        if self.note:
            lines.append(f"  note: {self.note}")
        return "\n".join(lines)

    def as_record(self) -> dict[str, Any]:
        """The report as ``mobius.json`` keeps it."""
        return {
            "reference": self.reference,
            "checked": self.checked,
            "diffs": self.diffs,
            "tokens_agree": self.tokens_agree,
            "atol": self.atol,
            "passed": self.passed,
            "note": self.note,
        }


def reference_missing(*modules: str) -> str | None:
    """The first of ``modules`` (default torch, transformers) that cannot be imported, else None."""
    import importlib.util

    for name in modules or ("torch", "transformers"):
        if importlib.util.find_spec(name) is None:
            return name
    return None


def is_quantized(package_dir: Path) -> bool:
    """Whether any graph of the package holds quantized weights (:data:`QUANTIZED_OPS`)."""
    import onnx

    for path in sorted(Path(package_dir).rglob("*.onnx")):
        model = onnx.load(str(path), load_external_data=False)
        if any(node.op_type in QUANTIZED_OPS for node in model.graph.node):
            return True
    return False


#: The record's dtype names (numpy's) of the float types a build computes in.
_COMPUTE_TYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def compute_dtype(record: dict) -> str:
    """The float type the graphs compute in (``f32``, ``f16``, ``bf16``), from their outputs.

    ``--dtype`` left unset keeps the checkpoint's own type, so the graphs say it, not
    the options. The narrowest float output wins (a package of several graphs).
    """
    found = {
        _COMPUTE_TYPES[value.get("dtype")]
        for graph in (record.get("graphs") or {}).values()
        for value in graph.get("outputs", [])
        if value.get("dtype") in _COMPUTE_TYPES
    }
    for dtype in ("bf16", "f16"):
        if dtype in found:
            return dtype
    return "f32"


def default_atol(package_dir: Path, record: dict) -> float | None:
    """:data:`DEFAULT_ATOL` of the graphs' float type, or None for a quantized build."""
    if is_quantized(package_dir):
        return None
    return DEFAULT_ATOL[compute_dtype(record)]


def validate_package(
    package_dir: str | os.PathLike,
    source: str | os.PathLike,
    *,
    atol: float | None = None,
    registry=None,
) -> ValidationReport:
    """Validate the package in ``package_dir`` against ``source``, the local checkpoint it was built from.

    The report is also written into the package's ``mobius.json`` (``validation``).
    Raises :class:`~mobius.errors.MobiusError` when the package has no record, its
    task has no validator, or the reference cannot load the source.
    """
    from mobius._record import RECORD_FILE, read_record
    from mobius._registry import registry as default_registry

    package_dir, source = Path(package_dir), Path(source)
    record = read_record(package_dir)
    task = record.get("task")
    info = (registry or default_registry).tasks().get(task) if isinstance(task, str) else None
    if info is None or info.validate is None:
        raise MobiusError(f"--validate: no validator for {task!r} packages")
    from mobius.plugins import load

    try:
        report = load(info.validate)(package_dir, source, record, reference_missing() is None)
    except MobiusError:
        raise
    except Exception as exc:  # a reference that refuses the sample, a kit's assertion
        raise MobiusError(
            f"--validate: the {task} check could not compare {package_dir} with {source}: "
            f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        ) from None
    report.task = task
    if report.reference is None and not report.note:
        report.note = "validation against the source needs torch and transformers (pip install torch transformers)"
    report.atol = atol if atol is not None else default_atol(package_dir, record)
    report.tokens_required = compute_dtype(record) == "f32"
    _write_validation(package_dir / RECORD_FILE, report)
    return report


def _write_validation(path: Path, report: ValidationReport) -> None:
    """Add the report to ``mobius.json``, replacing the file whole (never half-written)."""
    from mobius._record import dumps

    record = json.loads(path.read_text(encoding="utf-8"))
    record["validation"] = report.as_record()
    staging = path.with_name(path.name + ".partial")
    staging.write_text(dumps(record) + "\n", encoding="utf-8")
    os.replace(staging, path)


# -- shared by validators -------------------------------------------------------------


def load_reference(
    auto_class: str, source: Path, attn_implementation: str = "eager", **keywords: Any
):
    """The source as transformers reads it: ``auto_class.from_pretrained`` in float32, eval.

    A GGUF file goes through transformers' own GGUF reader (``gguf_file``). Attention
    runs ``eager`` unless a family whose eager path transformers gets wrong asks for
    another (``"sdpa"``).
    """
    import torch
    import transformers

    model_class = getattr(transformers, auto_class)
    arguments = dict(dtype=torch.float32, **keywords)
    if source.is_file():
        arguments["gguf_file"] = source.name
        source = source.parent
    try:
        model = model_class.from_pretrained(
            str(source),
            attn_implementation=attn_implementation,
            trust_remote_code=False,
            **arguments,
        )
    except Exception as exc:  # the reference's own refusal: say whose and why, in one line
        raise MobiusError(
            f"--validate: transformers' {auto_class} cannot load {source}: "
            f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        ) from None
    return model.eval()


def smoke_report(task: str, checked: str, outputs: dict[str, np.ndarray]) -> ValidationReport:
    """A smoke run's report: no reference; fails when an output is not finite."""
    bad = [
        name for name, value in outputs.items() if not np.isfinite(value.astype(np.float32)).all()
    ]
    report = ValidationReport(task, None, checked)
    report.diffs = {name: math.inf for name in bad}
    return report


SAMPLE_TEXTS = ("The quick brown fox jumps over the lazy dog.", "Hello, world!")


def against_sentence_transformers(session, source: Path) -> ValidationReport:
    """Validate a sentence-embedding package against sentence-transformers run on ``source``:
    the library's own pooling and normalisation are the reference."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise MobiusError(
            f"--validate: {source} is a sentence-transformers model: its reference needs "
            "sentence-transformers (pip install sentence-transformers)"
        ) from None
    import torch

    model = SentenceTransformer(str(source), device="cpu", trust_remote_code=False)
    features = model.tokenize(list(SAMPLE_TEXTS))
    with torch.no_grad():
        expected = model(dict(features))
    names = {i.name for i in session.get_inputs()}
    feeds = {k: v.numpy().astype(np.int64) for k, v in features.items() if k in names}
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
    real = feeds["attention_mask"].astype(bool)
    hidden = expected["token_embeddings"].float().numpy()
    report = ValidationReport(
        "feature-extraction", "sentence-transformers", f"{len(SAMPLE_TEXTS)} sample sentences"
    )
    report.diffs = {
        "last_hidden_state": float(np.abs(got["last_hidden_state"] - hidden)[real].max()),
        "sentence_embedding": float(
            np.abs(got["sentence_embedding"] - expected["sentence_embedding"].float().numpy()).max()
        ),
    }
    return report
