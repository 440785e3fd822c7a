"""A whole diffusers pipeline: every component of ``model_index.json`` built or copied into one package.

A pipeline directory (``save_pretrained`` of a diffusers pipeline, or a hub snapshot
of one) holds ``model_index.json``, which maps each component name to its
``[library, class]``, and one subdirectory per component. The package mirrors it:

- a *model* component (its class registered, or for a transformers class its
  ``config.json`` ``model_type``) is built as :func:`mobius.build` builds a model
  directory, its graphs under the component's name: ``unet/model.onnx``,
  ``vae/encoder/model.onnx``, ``vae/decoder/model.onnx``,
  ``text_encoder/model.onnx``, each beside its ``config.json``;
- a tokenizer, image processor or scheduler is copied file by file
  (``tokenizer/vocab.json``, ``scheduler/scheduler_config.json``);
- ``model_index.json`` is copied as it is.

A component whose value is ``null`` (or ``[null, null]``) is absent and skipped;
any other component mobius neither builds nor copies is an error naming it, never
skipped silently: pass its name in ``skip`` to leave it out on purpose (a safety
checker). The package is saved atomically like any other (:class:`ModelPackage`).
"""

from __future__ import annotations

from pathlib import Path

from mobius._package import ModelPackage
from mobius.errors import ConfigError, MobiusError, ModelSourceError

INDEX = "model_index.json"

#: Class-name endings of the components copied as files: tokenizers, processors, schedulers.
COPIED_SUFFIXES = (
    "Tokenizer",
    "TokenizerFast",
    "ImageProcessor",
    "ImageProcessorFast",
    "FeatureExtractor",
    "Processor",
    "Scheduler",
)

#: transformers 5's tokenizer base classes, which a pipeline saved with a generic tokenizer names.
TOKENIZER_BACKENDS = (
    "PreTrainedTokenizer",
    "PreTrainedTokenizerFast",
    "TokenizersBackend",
    "SentencePieceBackend",
    "PythonBackend",
)


def is_pipeline(model_dir: Path) -> bool:
    """Whether a directory is a diffusers pipeline (``model_index.json``, no ``config.json``)."""
    return (model_dir / INDEX).is_file() and not (model_dir / "config.json").is_file()


def read_index(model_dir: Path) -> dict:
    """``model_index.json`` of a pipeline directory as a dict."""
    from mobius._build import _read_json

    return _read_json(model_dir / INDEX)


def pipeline_components(index: dict) -> dict[str, tuple[str | None, str]]:
    """The present components of a ``model_index.json``: name -> ``(library, class name)``.

    Keys starting with ``_`` are the pipeline's own fields (``_class_name``,
    ``_diffusers_version``); plain values are its settings (``requires_safety_checker``).
    A component whose value is ``null`` or ``[null, null]`` is absent.
    """
    components = {}
    for name, value in index.items():
        if name.startswith("_") or not isinstance(value, (list, tuple)):
            continue
        if len(value) != 2:
            raise ConfigError(f"{INDEX}: component {name!r} is {value!r}, not [library, class]")
        library, class_name = value
        if class_name is None:
            continue
        if not isinstance(class_name, str) or not (library is None or isinstance(library, str)):
            raise ConfigError(f"{INDEX}: component {name!r} is {value!r}, not [library, class]")
        components[name] = (library, class_name)
    return components


def component_key(registry, component_dir: Path, class_name: str) -> str | None:
    """The registry key a model component builds as, or None when it is not a model mobius builds.

    Its class name first (diffusers classes, ``T5EncoderModel``), then for a
    transformers class its ``config.json`` ``model_type`` (``CLIPTextModel`` is
    registered as ``clip_text_model``).
    """
    from mobius._build import _read_json

    if class_name in registry:
        return class_name
    config = component_dir / "config.json"
    if config.is_file():
        model_type = _read_json(config).get("model_type")
        if isinstance(model_type, str) and model_type in registry:
            return model_type
    return None


def _copied(class_name: str) -> bool:
    return class_name.endswith(COPIED_SUFFIXES) or class_name in TOKENIZER_BACKENDS


def build_pipeline(
    model_dir: Path,
    *,
    dtype=None,
    load_weights: bool = True,
    ep: str = "default",
    allow_pickle: bool = False,
    skip: tuple[str, ...] = (),
    registry=None,
) -> ModelPackage:
    """Build every model component of a pipeline directory and gather its files; see the module doc.

    ``dtype``, ``load_weights``, ``ep`` and ``allow_pickle`` apply to each model
    component as in :func:`mobius.build` (each keeps its checkpoint's dtype by
    default). ``skip`` names components to leave out.

    Raises:
        MobiusError: a component mobius cannot build or copy (named), a missing
            component directory, or any error of a component's build (prefixed
            with the component's name).
    """
    from mobius._build import build
    from mobius._registry import registry as default_registry

    registry = registry or default_registry
    index = read_index(model_dir)
    components = pipeline_components(index)
    unknown_skips = sorted(set(skip) - set(components))
    if unknown_skips:
        raise ConfigError(
            f"cannot skip {', '.join(unknown_skips)}: {model_dir} has no such component "
            f"(it has {', '.join(sorted(components))})"
        )
    plan: dict[str, str | None] = {}  # component -> registry key, or None: copied
    for name, (library, class_name) in sorted(components.items()):
        if name in skip:
            continue
        component_dir = model_dir / name
        if not component_dir.is_dir():
            raise ModelSourceError(
                f"pipeline component {name!r} ({class_name}) has no directory {component_dir}"
            )
        key = component_key(registry, component_dir, class_name)
        if key is None and not _copied(class_name):
            raise ConfigError(
                f"pipeline component {name!r} is a {library or '?'}.{class_name}, which mobius "
                f"neither builds nor copies (registered: mobius list); leave it out with "
                f"--skip-component {name}"
            )
        plan[name] = key
    if not any(key is not None for key in plan.values()):
        raise ConfigError(f"pipeline {model_dir} has no component that mobius builds")

    package = ModelPackage(models={}, config=index, task="pipeline")
    package.extra_files[INDEX] = model_dir / INDEX
    for name, key in plan.items():
        component_dir = model_dir / name
        if key is None:
            for path in sorted(component_dir.iterdir()):
                if path.is_file():
                    package.extra_files[f"{name}/{path.name}"] = path
            continue
        try:
            part = build(
                component_dir,
                dtype=dtype,
                load_weights=load_weights,
                ep=ep,
                allow_pickle=allow_pickle,
                registry=registry,
                model_type=key,
            )
        except MobiusError as exc:
            raise type(exc)(f"pipeline component {name!r}: {exc}") from exc
        for graph, model in part.models.items():
            package.models[f"{name}/{graph}"] = model
        for file, path in part.aux_files().items():
            package.extra_files[f"{name}/{file}"] = path
        for file, text in part.text_files.items():
            package.text_files[f"{name}/{file}"] = text
    return package
