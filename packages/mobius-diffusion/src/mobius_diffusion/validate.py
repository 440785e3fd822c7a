"""``mobius build --validate`` for mobius-diffusion's components (the contract: :mod:`mobius.validate`).

One validator serves the four component tasks (``vae``, ``denoising``, ``controlnet``,
``adapter``): every graph of the package runs on its sample feeds
(:mod:`mobius_diffusion.samples`) and, with torch and diffusers, the component as
diffusers reads it (``<class>.from_pretrained``, float32; an IP-Adapter file through
diffusers' own converter) makes what each graph stands for (the kit's
:data:`~mobius_diffusion.testing.DIFFUSERS_CALLS`),
compared by the parity kit's :func:`~mobius_diffusion.testing.compare_graph`.

The diffs are the kit's measure: the max abs difference over ``max(1, max|reference|)``,
so that a large output (a VAE's log-variance, a video transformer's states) is held to
the same relative bar as a unit-scale one. Without torch or diffusers the same feeds go
through the graphs alone (a smoke run).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import mobius.validate
from mobius.errors import MobiusError
from mobius.validate import ValidationReport, smoke_report
from mobius_diffusion.pipelines.ip_adapter import IP_ADAPTER_COMPONENT
from mobius_diffusion.samples import axis_sizes, component_config, feeds_as_torch, sample_feeds
from mobius_diffusion.tasks import IP_ADAPTER_OPTION
from mobius_diffusion.testing._references import DIFFUSERS_CALLS

#: What the report's note says of the diffs.
RELATIVE_NOTE = (
    "diffs are max abs differences over max(1, max |reference|), as the parity kit measures"
)


def validate_component(package_dir: Path, source: Path, record: dict, reference: bool):
    """Every graph of a component package on its sample feeds, against diffusers."""
    from mobius_diffusion.testing._parity import compare_graph

    class_name, task, graphs = _component(record)
    config = component_config(class_name, source)
    sessions = {graph: _session(package_dir, graph) for graph in graphs}
    feeds = {graph: sample_feeds(class_name, config, s) for graph, s in sessions.items()}
    checked = _checked(class_name, config, sessions)
    missing = None if not reference else mobius.validate.reference_missing("diffusers")
    if not reference or missing:
        outputs = {
            f"{graph}:{name}": value
            for graph, session in sessions.items()
            for name, value in _run(session, feeds[graph]).items()
        }
        report = smoke_report(task, checked, outputs)
        report.note = (
            "validation against the source needs torch and diffusers (pip install torch diffusers)"
        )
        return report
    import torch

    model, name = _load_diffusers(class_name, source, record)
    report = ValidationReport(task, name, checked, note=RELATIVE_NOTE)
    for graph, session in sessions.items():
        try:
            with torch.no_grad():
                inputs = feeds_as_torch(feeds[graph])
                expected = DIFFUSERS_CALLS[class_name](model, graph, inputs)
            diffs = compare_graph(session, feeds[graph], expected)
        except Exception as exc:  # a refusal of the kit, a model the sample does not run through
            message = " ".join(str(exc).split())[:300]
            raise MobiusError(f"--validate: {graph}: {type(exc).__name__}: {message}") from exc
        for output, (diff, scale) in diffs.items():
            report.diffs[f"{graph}:{output}"] = diff / max(1.0, scale)
    return report


def validate_pipeline(package_dir: Path, source: Path, record: dict, reference: bool):
    """Each built component of a pipeline package by its own task's validator, against
    the pipeline directory's ``<component>/``; the diffs named ``<component>/...``.
    """
    from mobius import registry
    from mobius.plugins import load

    report = ValidationReport("pipeline", None, "")
    checked, references, notes = [], [], {}
    for component, entry in _components(record):
        info = registry.tasks().get(entry.get("task"))
        if info is None or info.validate is None:
            raise MobiusError(f"--validate: no validator for {component}'s {entry.get('task')!r}")
        part = dict(record, task=entry["task"], models=[entry])
        validate = load(info.validate)
        part_source = source / component
        if component == IP_ADAPTER_COMPONENT:  # built from the --ip-adapter file
            part_source = Path(_ip_adapter_file(record))
        result = validate(package_dir / component, part_source, part, reference)
        report.diffs.update({f"{component}/{k}": v for k, v in result.diffs.items()})
        checked.append(f"{component}: {result.checked}")
        references.append(f"{component}: {result.reference}" if result.reference else None)
        if result.note:
            notes.setdefault(result.note, []).append(component)
        if result.tokens_agree is not None:
            report.tokens_agree = report.tokens_agree is not False and result.tokens_agree
    report.checked = "; ".join(checked)
    report.reference = "; ".join(references) if all(references) else None
    report.note = "; ".join(f"{', '.join(names)}: {note}" for note, names in notes.items())
    return report


def _ip_adapter_file(record: dict) -> str | None:
    """The ``--ip-adapter`` file of the build the record describes, or None."""
    plugin = (record.get("options") or {}).get("plugin") or {}
    return plugin.get(IP_ADAPTER_OPTION)


def _components(record: dict):
    """``(component, entry)`` per built component of a pipeline record, the entry's graph
    paths made relative to the component's directory (SDXL's two text encoders share one
    entry). A component is a plain name: it is joined to the package's and the source's paths."""
    for entry in record.get("models") or []:
        graphs = entry.get("graphs") if isinstance(entry, dict) else None
        if not isinstance(graphs, list) or not all(isinstance(g, str) for g in graphs):
            raise MobiusError("--validate: mobius.json lists a component without its graphs")
        by_component: dict[str, list[str]] = {}
        for graph in graphs:
            component, _, rest = graph.partition("/")
            if not rest or not component.replace("_", "").replace("-", "").isalnum():
                raise MobiusError(
                    f"--validate: mobius.json names a graph {graph!r} of no component"
                )
            by_component.setdefault(component, []).append(rest)
        for component, paths in by_component.items():
            yield component, dict(entry, graphs=paths)


def _component(record: dict) -> tuple[str, str, list[str]]:
    """The record's one component: its class (a registry key), task and graph paths."""
    models = record.get("models")
    entry = models[0] if isinstance(models, list) and len(models) == 1 else None
    class_name = entry.get("model_type") if isinstance(entry, dict) else None
    if class_name not in DIFFUSERS_CALLS:
        raise MobiusError(f"--validate: mobius-diffusion has no sample for {class_name!r}")
    graphs = entry.get("graphs")
    if not isinstance(graphs, list) or not all(isinstance(g, str) for g in graphs):
        raise MobiusError("--validate: mobius.json lists no graphs for the component")
    return class_name, record.get("task"), graphs


def _session(package_dir: Path, graph: str):
    """The CPU session of ``<graph>.onnx``, a path the record names (kept inside the package)."""
    import onnxruntime as ort

    path = (package_dir / f"{graph}.onnx").resolve()
    if package_dir.resolve() not in path.parents or not path.is_file():
        raise MobiusError(f"--validate: mobius.json names a graph {graph!r} the package lacks")
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _run(session, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    values = session.run(None, feeds)
    return dict(zip([o.name for o in session.get_outputs()], values, strict=True))


def _checked(class_name: str, config, sessions: dict) -> str:
    """The sample in words: its batch and the sizes of the named axes the graphs take."""
    sizes = axis_sizes(class_name, config)
    axes = {d for s in sessions.values() for i in s.get_inputs() for d in i.shape}
    named = ", ".join(f"{a} {sizes[a]}" for a in sorted(axes & set(sizes)) if a != "batch")
    return f"a batch of {sizes['batch']} seeded samples ({named})"


def _load_diffusers(class_name: str, source: Path, record: dict):
    """The component as diffusers reads it, float32, eval; and the report's name for it."""
    import torch

    from mobius_diffusion.testing._references import diffusers_class

    if Path(source).is_file():  # a lone IP-Adapter file: diffusers' own converter reads it
        return _diffusers_image_projection(source), "diffusers' IP-Adapter image projection"
    model_class = diffusers_class(class_name)  # a registered key, not any name from a file
    pickle = bool((record.get("options") or {}).get("allow_pickle"))
    try:
        model = model_class.from_pretrained(
            str(source), torch_dtype=torch.float32, use_safetensors=not pickle
        )
    except Exception as exc:  # the reference's own refusal, in one line
        raise MobiusError(
            f"--validate: diffusers' {class_name} cannot load {source}: "
            f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        ) from None
    adapter = _ip_adapter_file(record)
    if adapter is not None and class_name == "UNet2DConditionModel":  # built with --ip-adapter
        from safetensors.torch import load_file

        from mobius_diffusion.testing._references import load_ip_adapter_attention

        load_ip_adapter_attention(model, load_file(str(adapter)))
        return model.eval(), f"diffusers {class_name} with the IP-Adapter of {Path(adapter).name}"
    return model.eval(), f"diffusers {class_name}"


def _diffusers_image_projection(path: Path):
    """The image projection diffusers' ``load_ip_adapter`` makes of a checkpoint's ``image_proj.*``."""
    from diffusers import UNet2DConditionModel
    from safetensors.torch import load_file

    state = {
        k.removeprefix("image_proj."): v
        for k, v in load_file(str(path)).items()
        if k.startswith("image_proj.")
    }
    unet = UNet2DConditionModel.__new__(UNet2DConditionModel)  # only its converter is used
    convert = unet._convert_ip_adapter_image_proj_to_diffusers
    return convert(state, low_cpu_mem_usage=False).float().eval()
