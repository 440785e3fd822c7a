"""One build: model id or directory → config → module tree → graphs → weights → package."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import warnings
from pathlib import Path
from typing import Any

import onnx_ir as ir

from mobius._config import (
    ENCODER_HEADS,
    POOLING_MODES,
    VISION_HEADS,
    VISION_LANGUAGE_FORMS,
    ComponentConfig,
    EncoderConfig,
    VisionConfig,
    VisionLanguageConfig,
)
from mobius._package import ModelPackage
from mobius._registry import registry as default_registry
from mobius.components._runtime import EXECUTION_PROVIDERS, execution_provider
from mobius.errors import CheckpointError, ConfigError, MobiusError, ModelSourceError
from mobius.tasks import get_task
from mobius.weights import GGUFCheckpoint, apply_weights, checkpoint_dtype, resolve_model
from mobius.weights._open import open_checkpoint
from mobius.weights._safetensors import SafetensorsCheckpoint

DTYPES = {
    "f32": ir.DataType.FLOAT,
    "f16": ir.DataType.FLOAT16,
    "bf16": ir.DataType.BFLOAT16,
}


def parse_dtype(dtype: str | ir.DataType | None) -> ir.DataType | None:
    """``"f32" | "f16" | "bf16"`` (or an ``ir.DataType``) to an ``ir.DataType``."""
    if dtype is None or isinstance(dtype, ir.DataType):
        return dtype
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}") from None


# What a config that mobius cannot build raises while it is read or normalised (a
# field of the wrong type, a missing one, a zero head count): refused as ConfigError.
_CONFIG_FAILURES = (
    TypeError,
    ValueError,
    KeyError,
    AttributeError,
    IndexError,
    ZeroDivisionError,
    OverflowError,
)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _read_json(path: Path) -> dict:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise ModelSourceError(f"unreadable {path.name} in {path.parent}: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path.name} in {path.parent} is not a JSON object")
    return raw


def read_config_json(model_dir: Path) -> dict:
    """A model directory's ``config.json`` as a dict with a string ``model_type``.

    A diffusers component's config names its class (``_class_name``) instead: that
    class is the key. A diffusers pipeline (``model_index.json``, no config.json) has
    no config of its own: :func:`build` builds it whole (:mod:`mobius._pipeline`).
    """
    config_path = model_dir / "config.json"
    index = model_dir / "model_index.json"
    if not config_path.is_file() and index.is_file():
        pipeline = _read_json(index)
        raise ModelSourceError(
            f"{model_dir} is a diffusers pipeline ({pipeline.get('_class_name', '?')}) with no "
            "config.json of its own: mobius build builds it whole; give one component's "
            "directory (unet/, vae/...) to describe or build that component alone"
        )
    if not config_path.is_file():
        raise ModelSourceError(f"no config.json in {model_dir}")
    raw = _read_json(config_path)
    if not raw.get("model_type") and isinstance(raw.get("_class_name"), str):
        raw["model_type"] = raw["_class_name"]  # a diffusers component: its class is the key
    model_type = raw.get("model_type")
    if not model_type:
        raise ModelSourceError(f"config.json in {model_dir} has no model_type")
    if not isinstance(model_type, str):
        raise ConfigError(f"config.json in {model_dir}: model_type must be a string")
    return raw


def is_diffusers_component(raw: dict) -> bool:
    """Whether a ``config.json`` dict is a diffusers component's (it names its class)."""
    return isinstance(raw.get("_class_name"), str) and raw["model_type"] == raw["_class_name"]


def read_model_type(model_dir: Path) -> str:
    """The ``model_type`` of a model directory's ``config.json``."""
    return read_config_json(model_dir)["model_type"]


def lookup(registry, model_dir: Path, model_type: str | None = None):
    """The registration for a model directory's config, refusing configs that need their own code.

    The key is ``model_type`` when given (a pipeline component's class), else a
    registered architecture class of ``config.json``'s ``architectures`` (``T5EncoderModel``:
    T5's encoder alone, where the ``model_type`` ``t5`` is the encoder–decoder), else
    the config's ``model_type``.

    ``auto_map`` names Python files of the model's repository
    (``trust_remote_code``). mobius never runs them: a config whose type mobius
    does not register itself is refused with that reason, and a registered type
    is built by mobius's own code, the ``auto_map`` ignored.
    """
    raw = read_config_json(model_dir)
    if model_type is not None:
        return registry.get(model_type)
    architectures = raw.get("architectures")
    for architecture in architectures if isinstance(architectures, list) else []:
        if isinstance(architecture, str) and architecture in registry:
            return registry.get(architecture)
    model_type = raw["model_type"]
    if raw.get("auto_map") and model_type not in registry:
        raise ConfigError(
            f"model_type {model_type!r} of {model_dir} is defined by code in the model's "
            "repository (auto_map, trust_remote_code): mobius never runs a model's own code, "
            "and builds only the architectures it implements (mobius list)"
        )
    return registry.get(model_type)


@contextlib.contextmanager
def _quiet_transformers():
    """transformers' own warnings off while it reads a config: mobius reports what matters."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def load_hf_config(model_dir: Path) -> Any:
    """The config object of a model directory (no model code, no torch).

    A transformers config object, or for a diffusers component (``_class_name``) its
    ``config.json`` as a :class:`~mobius._config.ComponentConfig`: diffusers is not
    needed to build one.
    """
    from transformers import AutoConfig

    raw = read_config_json(model_dir)
    if is_diffusers_component(raw):
        return ComponentConfig(raw)
    try:
        with _quiet_transformers():
            return AutoConfig.from_pretrained(model_dir, trust_remote_code=False)
    except OSError as exc:
        raise ModelSourceError(f"cannot read the config in {model_dir}: {exc}") from None
    except Exception as exc:  # transformers' own validation of the fields
        raise ConfigError(f"invalid config in {model_dir}: {_one_line(exc)}") from exc


def hf_config_from_dict(fields: dict) -> Any:
    """A transformers config object from a config dict (as a GGUF header gives it)."""
    from transformers import AutoConfig

    fields = dict(fields)
    try:
        with _quiet_transformers():
            return AutoConfig.for_model(fields.pop("model_type"), **fields)
    except Exception as exc:  # transformers' own validation of the fields
        raise ConfigError(f"unusable model config: {_one_line(exc)}") from exc


# Sizes no real model comes near; past them a config is corrupt, and building its
# graph would only exhaust memory (80 million layers, a 2**40 vocabulary).
SIZE_LIMITS = {
    "num_hidden_layers": 1 << 12,
    "num_layers": 1 << 12,
    "hidden_size": 1 << 20,
    "intermediate_size": 1 << 22,
    "head_dim": 1 << 16,
    "num_attention_heads": 1 << 14,
    "num_key_value_heads": 1 << 14,
    "vocab_size": 1 << 24,
    "max_position_embeddings": 1 << 25,
    "num_local_experts": 1 << 14,
    "num_experts": 1 << 14,
}


def check_sizes(hf_config: Any, source: Path | str) -> None:
    """Refuse a config whose sizes are not non-negative integers within :data:`SIZE_LIMITS`.

    A size may also be a per-layer list of such integers.
    """
    for name, limit in SIZE_LIMITS.items():
        try:
            value = getattr(hf_config, name, None)
        except Exception:  # a per-layer attribute that the config will not give globally
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= limit:
                raise ConfigError(
                    f"config of {source}: {name} = {value!r} is not an integer from 0 to {limit}"
                )


# A checkpoint's architecture class names its head: what ``--head auto`` builds.
_HEAD_OF_ARCHITECTURE = {
    "ForMaskedLM": "masked-lm",
    "ForSequenceClassification": "sequence-classification",
    "ForTokenClassification": "token-classification",
}


def _sentence_transformers_pooling(model_dir: Path) -> tuple[str, bool] | None:
    """``(pooling, normalize)`` of a sentence-transformers directory (modules.json), else None.

    Modules mobius does not build (a Dense projection, mean-sqrt-len pooling) are
    refused rather than left out, which would change the embeddings.
    """
    modules_path = model_dir / "modules.json"
    if not modules_path.is_file():
        return None
    try:
        modules = json.loads(modules_path.read_text(encoding="utf-8"))
        kinds = [str(m["type"]).rsplit(".", 1)[-1] for m in modules]
        paths = {str(m["type"]).rsplit(".", 1)[-1]: m.get("path", "") for m in modules}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"unreadable modules.json in {model_dir}: {exc}") from None
    unsupported = [k for k in kinds if k not in ("Transformer", "Pooling", "Normalize")]
    if unsupported:
        raise ConfigError(
            f"sentence-transformers modules {', '.join(unsupported)} in {model_dir} are not "
            "built by mobius; build the encoder alone with --head none"
        )
    mode = "mean"
    if "Pooling" in kinds:
        pooling = _read_json(model_dir / paths["Pooling"] / "config.json")
        modes = [
            m
            for m in ("cls", "mean", "max", "mean_sqrt_len")
            if pooling.get(f"pooling_mode_{m}_tokens" if m != "cls" else "pooling_mode_cls_token")
        ]
        if isinstance(pooling.get("pooling_mode"), str):
            modes = [pooling["pooling_mode"]]
        if len(modes) != 1 or modes[0] not in POOLING_MODES:
            raise ConfigError(
                f"sentence-transformers pooling {modes or 'none'} in {model_dir}: mobius pools "
                f"with one of {', '.join(POOLING_MODES)}"
            )
        mode = modes[0]
    return mode, "Normalize" in kinds


def encoder_head(
    model_dir: Path | None,
    hf_config: Any,
    head: str = "auto",
    pooling: str | None = None,
    normalize: bool | None = None,
) -> dict[str, Any]:
    """The head, pooling and normalisation of an encoder build (``--head``, ``--pooling``...).

    ``head="auto"`` reads the checkpoint: a sentence-transformers directory gives a
    sentence embedding pooled and normalised as its modules say; otherwise the
    architecture class decides (``BertForMaskedLM``: masked-lm...; ``BertModel``: none).
    """
    if head not in ("auto", *ENCODER_HEADS):
        raise ConfigError(f"unknown head {head!r}; choose auto or {', '.join(ENCODER_HEADS)}")
    found = None
    if head == "auto":
        found = _sentence_transformers_pooling(model_dir) if model_dir is not None else None
        architecture = next(iter(getattr(hf_config, "architectures", None) or []), "") or ""
        suffix = next((s for s in _HEAD_OF_ARCHITECTURE if architecture.endswith(s)), None)
        head = "sentence-embedding" if found else _HEAD_OF_ARCHITECTURE.get(suffix, "none")
    st_pooling, st_normalize = found or ("mean", False)
    pooling = pooling or st_pooling
    if pooling not in POOLING_MODES:
        raise ConfigError(f"unknown pooling {pooling!r}; choose {', '.join(POOLING_MODES)}")
    return dict(
        head=head, pooling=pooling, normalize=st_normalize if normalize is None else normalize
    )


def vision_head(hf_config: Any, head: str = "auto") -> dict[str, Any]:
    """The head of a vision encoder build: ``--head auto`` reads the architecture class."""
    if head not in ("auto", *VISION_HEADS):
        raise ConfigError(
            f"head {head!r} does not apply to vision encoders; choose auto or "
            f"{', '.join(VISION_HEADS)}"
        )
    if head == "auto":
        architectures = getattr(hf_config, "architectures", None) or []
        heads = ("ForImageClassification", "ForImageClassificationWithTeacher")
        classifies = any(a.endswith(heads) for a in architectures)
        head = "image-classification" if classifies else "none"
    return dict(head=head)


def make_module(
    entry, hf_config: Any, source: Path, heads: dict[str, Any] | None = None
) -> tuple[Any, Any]:
    """The normalised config and module tree of a registration, refusing configs it cannot build.

    ``heads`` (from :func:`encoder_head`) sets an encoder config's head.
    """
    check_sizes(hf_config, source)
    try:
        config = entry.config_class().from_hf(hf_config)
        if isinstance(config, (EncoderConfig, VisionConfig, VisionLanguageConfig)) and heads:
            config = dataclasses.replace(config, **heads)
        return config, entry.module_class()(config)
    except MobiusError:
        raise
    except _CONFIG_FAILURES as exc:
        raise ConfigError(
            f"the config of {source} cannot be built as {entry.key}: "
            f"{type(exc).__name__}: {_one_line(exc)}"
        ) from exc


def cast_parameters(module, dtype: ir.DataType) -> None:
    """Give every floating-point parameter of ``module`` the build dtype (before the graph is built)."""
    for param in module.parameters():
        if param.dtype is not None and param.dtype.is_floating_point():
            param.type = ir.TensorType(dtype)


def build_from_module(
    module,
    task: str = "causal-lm",
    config: Any = None,
    dtype: ir.DataType | str = "f32",
    ep: str = "default",
) -> ModelPackage:
    """Build the graphs of a module tree for ``task``; parameters are left for :func:`apply_weights`.

    ``ep="cpu"`` or ``"cuda"`` uses ONNX Runtime's fused ops (GroupQueryAttention,
    SkipSimplifiedLayerNormalization...); ``"default"`` keeps to standard ONNX.
    """
    dtype = parse_dtype(dtype)
    config = config if config is not None else getattr(module, "config", None)
    cast_parameters(module, dtype)
    with execution_provider(ep):
        models = get_task(task).build(module, config, dtype)
    if ep != "default":
        from mobius.passes._fusion import fuse_for_runtime

        for model in models.values():
            fuse_for_runtime(model)
    return ModelPackage(models=models, config=config, task=task)


def recognise_weights_file(registry, path: Path, checkpoint) -> tuple[Any, ComponentConfig]:
    """The registration and config of a lone ``.safetensors`` file, told by its tensors alone.

    Some checkpoints ship as one weights file with no config (IP-Adapters): a
    family that can recognise them has a ``config_from_weights(shapes)`` returning
    its config fields (``model_type`` included), or None when the tensors are not its.
    """
    shapes = {name: tuple(tensor.shape) for name, tensor in checkpoint.items()}
    for entry in registry.entries():
        recognise = getattr(entry.module_class(), "config_from_weights", None)
        fields = recognise(shapes) if recognise is not None else None
        if fields is not None:
            return entry, ComponentConfig({"_class_name": fields.pop("model_type"), **fields})
    raise ModelSourceError(
        f"{path} is a lone safetensors file, and no installed mobius package recognises its "
        "tensors without a config.json; give the model's directory (config.json beside the weights)"
    )


def _gguf_tokenizer_files(checkpoint: GGUFCheckpoint) -> dict[str, str]:
    """The tokenizer files a GGUF file's metadata describes, or none (with a warning).

    A vocabulary mobius cannot rebuild does not stop the build: the graphs and
    weights are right, and a missing tokenizer is plain to see where a guessed one
    would tokenize wrongly without a word.
    """
    from mobius.weights._gguf_tokenizer import UnsupportedTokenizerError, gguf_tokenizer_files

    try:
        return gguf_tokenizer_files(checkpoint.file.metadata)
    except UnsupportedTokenizerError as exc:
        warnings.warn(f"no tokenizer files written: {exc}", stacklevel=3)
        return {}


def build(
    model: str | os.PathLike,
    *,
    dtype: str | ir.DataType | None = None,
    load_weights: bool = True,
    revision: str | None = None,
    registry=None,
    quant: str | None = None,
    block_size: int = 32,
    symmetric: bool = True,
    accuracy_level: int = 4,
    quant_lm_head: bool = True,
    quant_embeddings: bool = False,
    ep: str = "default",
    allow_pickle: bool = False,
    head: str = "auto",
    pooling: str | None = None,
    normalize: bool | None = None,
    form: str = "split",
    model_type: str | None = None,
    skip_components: tuple[str, ...] = (),
) -> ModelPackage:
    """Build the ONNX package of a HuggingFace model id or local directory.

    A diffusers pipeline (``model_index.json``) is built whole: each model component
    into ``<component>/``, its tokenizers and scheduler copied (see
    :mod:`mobius._pipeline`); ``skip_components`` names components to leave out.
    ``model_type`` builds a directory as that registry key instead of its config's.

    ``ep`` picks the runtime target: ``"default"`` (portable ONNX) or ``"cpu"`` /
    ``"cuda"`` (ONNX Runtime's fused contrib ops; see :func:`build_from_module`).
    ``dtype`` defaults to the checkpoint's own floating-point type. With
    ``load_weights=False`` only the graphs are built (their parameters stay empty).
    ``quant="int4"`` stores MatMul weights as 4-bit blocks for ``MatMulNBits``
    (round-to-nearest; ``block_size``, ``symmetric`` and ``accuracy_level`` as in
    :func:`mobius.passes.quantize_int4`), the output head included unless
    ``quant_lm_head=False``; ``quant_embeddings=True`` also stores the token
    embeddings as 4-bit blocks (``GatherBlockQuantized``), sharing a tied head's.
    ``allow_pickle=True`` reads a directory that has only pickled PyTorch weights
    (with a restricted unpickler that executes nothing); by default it is refused.
    ``head``, ``pooling`` and ``normalize`` choose an encoder's outputs (see
    :func:`encoder_head`; ``head="auto"`` follows the checkpoint). ``form`` lays out a
    vision–language package: ``"split"`` (vision, embedding and decoder graphs) or
    ``"single"`` (one graph); see :mod:`mobius.tasks._vision_language`.

    Raises:
        MobiusError: a subclass for each kind of bad input (see :mod:`mobius.errors`).
    """
    if quant not in (None, "int4"):
        raise MobiusError(f"unknown quantization {quant!r}; choose int4")
    if ep not in EXECUTION_PROVIDERS:
        raise MobiusError(
            f"unknown execution provider {ep!r}; choose {', '.join(EXECUTION_PROVIDERS)}"
        )
    if form not in VISION_LANGUAGE_FORMS:
        raise MobiusError(f"unknown form {form!r}; choose {', '.join(VISION_LANGUAGE_FORMS)}")
    if quant and not load_weights:
        raise MobiusError("quantization needs the weights; drop --no-weights")
    registry = registry or default_registry
    model_dir = resolve_model(model, revision=revision, allow_pickle=allow_pickle)
    from mobius._pipeline import build_pipeline, is_pipeline

    if model_dir.is_dir() and is_pipeline(model_dir):
        if quant or head != "auto" or pooling is not None or normalize is not None:
            raise ConfigError(
                "--quant, --head, --pooling and --normalize do not apply to a whole diffusers "
                "pipeline; build one component's directory for them"
            )
        return build_pipeline(
            model_dir,
            dtype=dtype,
            load_weights=load_weights,
            ep=ep,
            allow_pickle=allow_pickle,
            skip=tuple(skip_components),
            registry=registry,
        )
    if skip_components:
        raise ConfigError(f"--skip-component applies to diffusers pipelines; {model} is not one")
    if model_dir.is_file() and model_dir.suffix == ".safetensors":
        # A lone weights file (an IP-Adapter): the family that knows its tensors gives the config.
        checkpoint = SafetensorsCheckpoint.open(model_dir)
        entry, hf_config = recognise_weights_file(registry, model_dir, checkpoint)
        text_files = {}
    elif model_dir.is_file():
        if model_dir.suffix != ".gguf":
            raise ModelSourceError(
                f"{model_dir} is a file; give a model directory, a hub id, a .gguf file or a "
                "single-file adapter (.safetensors)"
            )
        # A GGUF file carries its config beside the weights (header only: cheap to open).
        checkpoint = GGUFCheckpoint.open(model_dir)
        entry = registry.get(checkpoint.config["model_type"])
        hf_config = hf_config_from_dict(checkpoint.config)
        text_files = _gguf_tokenizer_files(checkpoint)
    else:
        entry = lookup(registry, model_dir, model_type)  # an unknown type fails first
        hf_config = load_hf_config(model_dir)
        checkpoint = open_checkpoint(model_dir, allow_pickle=allow_pickle) if load_weights else None
        text_files = {}
    heads = None
    if entry.task == "feature-extraction":
        source_dir = model_dir if model_dir.is_dir() else None
        heads = encoder_head(source_dir, hf_config, head, pooling, normalize)
    elif entry.task == "image-classification" and pooling is None and normalize is None:
        heads = vision_head(hf_config, head)
    elif head not in ("auto", "none") or pooling is not None or normalize is not None:
        raise ConfigError(
            f"--head, --pooling and --normalize apply to encoder models; {entry.key} is a "
            f"{entry.task} model"
        )
    elif entry.task in ("vision-language", "cross-attention-vision-language"):
        heads = dict(form=form)
    config, module = make_module(entry, hf_config, model_dir, heads)
    if not load_weights:
        checkpoint = None
    dtype = parse_dtype(dtype)
    if dtype is None:
        dtype = (checkpoint_dtype(checkpoint) if checkpoint else None) or ir.DataType.FLOAT
    if dtype not in DTYPES.values():
        raise CheckpointError(f"checkpoint dtype {dtype.name} is not one mobius builds in")

    package = build_from_module(module, entry.task, config, dtype, ep)
    package.source_dir = model_dir if model_dir.is_dir() else None
    package.text_files.update(text_files)
    if checkpoint is not None:
        weights = dict(checkpoint)
        preprocess = getattr(module, "preprocess_weights", None)
        if preprocess is not None:
            weights = preprocess(weights)
        apply_weights(
            package.models.values(), weights, ignore=getattr(module, "ignored_weights", ())
        )
        if ep != "default":
            from mobius.passes._fusion import pack_parallel_matmuls, pack_qkv

            for graph_model in package.models.values():
                pack_qkv(graph_model)  # first: attention takes q|k|v packed, with no Split
                pack_parallel_matmuls(graph_model)
    if quant == "int4":
        from mobius.passes import quantize_int4
        from mobius.passes._fusion import unflatten_head

        for graph_model in package.models.values():
            quantize_int4(
                graph_model,
                block_size=block_size,
                symmetric=symmetric,
                accuracy_level=accuracy_level,
                lm_head=quant_lm_head,
                embeddings=quant_embeddings,
                # GGUF Q4_0/Q4_1/Q8_0 blocks are repacked as they are, not re-rounded.
                prequantized=weights if isinstance(checkpoint, GGUFCheckpoint) else None,
            )
            unflatten_head(graph_model)
    return package
