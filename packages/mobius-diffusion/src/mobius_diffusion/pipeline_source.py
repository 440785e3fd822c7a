"""A whole diffusers pipeline: every component of ``model_index.json`` built or copied into one package.

A pipeline directory (``save_pretrained`` of a diffusers pipeline, or a hub snapshot
of one) holds ``model_index.json``, which maps each component name to its
``[library, class]``, and one subdirectory per component. :class:`PipelineSource`
(recognised by :func:`recognise_pipeline`) builds a package that mirrors it:

- a *model* component (its class registered, or for a transformers class its
  ``config.json`` ``model_type``) is built as ``mobius build`` builds that
  component's directory (:func:`mobius.source.open_source`), its graphs under the
  component's name: ``unet/model.onnx``, ``vae/encoder/model.onnx``,
  ``vae/decoder/model.onnx``, ``text_encoder/model.onnx``, each beside its
  ``config.json``;
- a decoder LLM used as a text encoder (Sana's Gemma 2, HiDream's Llama...) builds
  with mobius-text's ``text-encoder`` task, with the hidden states its pipeline
  reads (:mod:`mobius_diffusion.decoder_text_encoders`);
- a tokenizer, image processor or scheduler is copied file by file
  (``tokenizer/vocab.json``, ``scheduler/scheduler_config.json``);
- ``model_index.json`` is copied as it is.

A component whose value is ``null`` (or ``[null, null]``) is absent and skipped;
any other component mobius neither builds nor copies is an error naming it, never
skipped silently: ``--skip-component NAME`` (build option ``skip_component``)
leaves it out on purpose (a safety checker). A component whose weights another one
already holds is left out by rule, and a warning says so (:data:`FOLDED_COMPONENTS`). The package is saved atomically like
any other (:class:`mobius.ModelPackage`).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

from mobius.errors import ConfigError, MobiusError, ModelSourceError
from mobius.safe_paths import join_inside
from mobius.source import Source, open_source, read_json
from mobius_diffusion.decoder_text_encoders import (
    check_hidden_states,
    component_plugin,
    text_encoder_key,
)
from mobius_diffusion.ip_adapter_pipeline import (
    IP_ADAPTER_COMPONENT,
    build_image_projection,
    check_ip_adapter_plan,
    ip_adapter_plugin,
)
from mobius_diffusion.source import LEGACY_CLASSES, component_class
from mobius_diffusion.unet_residuals import residuals_plugin

logger = logging.getLogger("mobius")

INDEX = "model_index.json"

#: The build option (``--skip-component``) naming components to leave out.
SKIP_OPTION = "skip_component"

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

#: Components whose weights another component holds, left out of the build by rule (a
#: warning names each): name -> (the component holding them, the class it must be). The
#: AnimateDiff pipelines save the ``motion_adapter`` their ``unet`` was made from; when the
#: unet is a ``UNetMotionModel`` it holds the motion modules, and diffusers runs the unet's
#: copy and reads nothing of the adapter (it merges the adapter only into a 2-D UNet at
#: load, which mobius refuses).
FOLDED_COMPONENTS = {"motion_adapter": ("unet", "UNetMotionModel")}

#: transformers 5's tokenizer base classes, which a pipeline saved with a generic tokenizer names.
TOKENIZER_BACKENDS = (
    "PreTrainedTokenizer",
    "PreTrainedTokenizerFast",
    "TokenizersBackend",
    "SentencePieceBackend",
    "PythonBackend",
)


#: The files of a pipeline's second hub download: its index, and each component folder's
#: configs, tokenizer and scheduler files and safetensors weights.
HUB_PIPELINE_PATTERNS = (
    "model_index.json",
    "*/*.json",  # config.json, scheduler_config.json, tokenizer files, weight indexes
    "*/*.txt",  # merges.txt, vocab.txt
    "*/*.model",  # spiece.model
    "*/*.jinja",  # chat_template.jinja (Flux.2 Klein's prompt goes through it)
    "*/*.safetensors",
)

#: Left out of it: weights of other variants (``*.fp16.safetensors``,
#: ``*.fp16-00001-of-00002.safetensors`` and their indexes); the default variant's
#: names have no second dot.
HUB_PIPELINE_IGNORE = ("*/*.*.safetensors", "*/*.safetensors.index.*.json", "*/*.*.bin")

#: Added with ``allow_pickle``.
HUB_PIPELINE_PICKLE_PATTERNS = ("*/*.bin",)


def hub_files(snapshot: Path, allow_pickle: bool) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """The component folders to fetch when a hub snapshot is a pipeline (else None).

    Core's first download brings the root files; a pipeline keeps its components in
    folders, so they come in a second one, the default weight variant only.
    """
    if not is_pipeline(snapshot):
        return None
    pickles = HUB_PIPELINE_PICKLE_PATTERNS if allow_pickle else ()
    return HUB_PIPELINE_PATTERNS + pickles, HUB_PIPELINE_IGNORE


def is_pipeline(model_dir: Path) -> bool:
    """Whether a directory is a diffusers pipeline (``model_index.json``, no ``config.json``)."""
    return (model_dir / INDEX).is_file() and not (model_dir / "config.json").is_file()


def read_index(model_dir: Path) -> dict:
    """``model_index.json`` of a pipeline directory as a dict."""
    return read_json(model_dir / INDEX)


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


def component_key(
    registry, component_dir: Path, class_name: str, pipeline_class: str | None = None
) -> str | None:
    """The registry key a model component builds as, or None when it is not a model mobius builds.

    Its class name first (diffusers classes, ``T5EncoderModel``; a legacy
    ``Transformer2DModel`` as the class diffusers loads its config as), then for a
    transformers class its ``config.json`` ``model_type`` (``CLIPTextModel`` is
    registered as ``clip_text_model``).
    """
    config = component_dir / "config.json"
    if class_name in LEGACY_CLASSES and config.is_file():
        class_name = component_class(class_name, read_json(config))
    class_name = text_encoder_key(class_name, pipeline_class)  # a decoder saved as its LM or VLM
    if class_name in registry:
        return class_name
    if config.is_file():
        model_type = read_json(config).get("model_type")
        if isinstance(model_type, str) and model_type in registry:
            return model_type
    return None


#: ``model_index.json`` fields that shape a component's graph, by component: its config gets
#: them (Wan 2.2 TI2V's per-token timesteps; the transformer's config does not tell them apart).
INDEX_FIELDS = {"transformer": ("expand_timesteps",), "transformer_2": ("expand_timesteps",)}


def _copied(class_name: str) -> bool:
    return class_name.endswith(COPIED_SUFFIXES) or class_name in TOKENIZER_BACKENDS


def _folded(name: str, components: dict[str, tuple[str | None, str]]) -> bool:
    """Whether component ``name`` is left out because another holds its weights (said in a
    warning); ConfigError when the holder is not of the class that holds them."""
    if name not in FOLDED_COMPONENTS:
        return False
    holder, holder_class = FOLDED_COMPONENTS[name]
    found = components.get(holder, (None, None))[1]
    if found != holder_class:
        raise ConfigError(
            f"pipeline component {name!r} is merged into a {found} {holder!r} when diffusers "
            f"loads the pipeline; mobius builds it only as part of a {holder_class} {holder!r} "
            "(save the pipeline after loading it in diffusers)"
        )
    logger.warning(
        "pipeline component %r left out: its weights are those of %r (a %s), which the "
        "pipeline runs",
        name,
        holder,
        holder_class,
    )
    return True


@dataclass
class PipelineSource(Source):
    """A diffusers pipeline directory, built whole; see the module docstring."""

    path: Path

    def build(self, options, registry):
        """Build every model component and gather the pipeline's files into one package.

        ``options`` apply to each model component as to a build of its directory
        (each keeps its checkpoint's dtype by default); ``options.plugin["skip_component"]``
        names components to leave out. ``--quant``, ``--head``, ``--pooling`` and
        ``--normalize`` are refused for a whole pipeline.

        Raises:
            MobiusError: a component mobius cannot build or copy (named), a missing
                component directory, or any error of a component's build (prefixed
                with the component's name).
        """
        from mobius import ModelPackage

        if (
            options.quant.method
            or options.head != "auto"
            or options.pooling is not None
            or options.normalize is not None
        ):
            raise ConfigError(
                "--quant, --head, --pooling and --normalize do not apply to a whole diffusers "
                "pipeline; build one component's directory for them"
            )
        model_dir = self.path
        skip = tuple(options.plugin.get(SKIP_OPTION) or ())
        plugin = {k: v for k, v in options.plugin.items() if k != SKIP_OPTION}
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
            if name in skip or _folded(name, components):
                continue
            # A component name is a folder of the pipeline and of the package: never "../x".
            component_dir = join_inside(model_dir, name, source=model_dir / INDEX)
            if not component_dir.is_dir():
                raise ModelSourceError(
                    f"pipeline component {name!r} ({class_name}) has no directory {component_dir}"
                )
            key = component_key(registry, component_dir, class_name, index.get("_class_name"))
            if key is None and not _copied(class_name):
                raise ConfigError(
                    f"pipeline component {name!r} is a {library or '?'}.{class_name}, which mobius "
                    f"neither builds nor copies (registered: mobius list); leave it out with "
                    f"--skip-component {name}"
                )
            plan[name] = key
        if not any(key is not None for key in plan.values()):
            raise ConfigError(f"pipeline {model_dir} has no component that mobius builds")
        check_hidden_states(plugin, (registry.get(k).task for k in plan.values() if k), model_dir)
        ip_adapter = check_ip_adapter_plan(plugin, {n for n, k in plan.items() if k})

        package = ModelPackage(models={}, config=index, task="pipeline")
        package.extra_files[INDEX] = join_inside(model_dir, INDEX, source=model_dir)
        for name, key in plan.items():
            component_dir = join_inside(model_dir, name, source=model_dir / INDEX)
            if key is None:
                for path in sorted(component_dir.iterdir()):
                    if path.is_file():  # a symlink out of the folder is refused, not copied
                        copied = join_inside(component_dir, path.name, source=component_dir)
                        package.extra_files[f"{name}/{path.name}"] = copied
                continue
            part_plugin = component_plugin(
                plugin, registry.get(key).task, index.get("_class_name"), name
            )
            part_plugin = residuals_plugin(part_plugin, name, {n for n, k in plan.items() if k})
            part_plugin = ip_adapter_plugin(part_plugin, name)
            part_options = dataclasses.replace(options, model_type=key, plugin=part_plugin)
            try:
                source = open_source(component_dir, part_options, registry)
                for field in INDEX_FIELDS.get(name, ()):  # diffusers reads them at call time
                    if index.get(field) is not None:
                        setattr(source.hf_config, field, index[field])
                part = source.build(part_options, registry)
            except MobiusError as exc:
                raise type(exc)(f"pipeline component {name!r}: {exc}") from exc
            for graph, model in part.models.items():
                package.models[f"{name}/{graph}"] = model
            for file, path in part.aux_files().items():
                package.extra_files[f"{name}/{file}"] = path
            for file, text in part.text_files.items():
                package.text_files[f"{name}/{file}"] = text
        if ip_adapter is not None:  # the adapter's image projection, a component of its own
            try:
                part = build_image_projection(ip_adapter, options, registry)
            except MobiusError as exc:
                raise type(exc)(f"--ip-adapter {ip_adapter.name}: {exc}") from exc
            for graph, model in part.models.items():
                package.models[f"{IP_ADAPTER_COMPONENT}/{graph}"] = model
            for file, text in part.text_files.items():
                package.text_files[f"{IP_ADAPTER_COMPONENT}/{file}"] = text
        return package


def recognise_pipeline(path: Path, options, registry) -> PipelineSource | None:
    """The source recogniser of a pipeline directory (``model_index.json``, no ``config.json``)."""
    return PipelineSource(path) if path.is_dir() and is_pipeline(path) else None


def build_pipeline(
    model_dir: Path, options=None, *, skip: tuple[str, ...] = (), registry=None, **keywords
):
    """The package of a pipeline directory, as ``mobius build`` makes it (before its last steps).

    ``options`` is a :class:`mobius.BuildOptions` (keywords set its fields, as in
    :func:`mobius.build`); ``skip`` names components to leave out. Unlike
    :func:`mobius.build`, parameters of a weightless build stay initializers and no
    generator config is added.
    """
    from mobius import registry as default_registry
    from mobius.options import BuildOptions

    options = BuildOptions.of(options, **keywords)
    if skip:
        options = BuildOptions.of(options, **{SKIP_OPTION: list(skip)})
    return PipelineSource(Path(model_dir)).build(options, registry or default_registry)
