"""mobius-diffusion's source recognisers besides the pipeline's: a component directory, a lone weights file.

- :func:`recognise_component`: a diffusers component directory (``unet/``,
  ``vae/``...), whose ``config.json`` names its class (``_class_name``) instead of a
  ``model_type``: that class is the registry key, and the config is read as it is
  (:class:`~mobius_diffusion.config.ComponentConfig`); diffusers is not needed.
- :func:`recognise_weights_file`: a lone ``.safetensors`` file with no config (an
  IP-Adapter), told by its tensors alone.

A config naming diffusers' legacy ``Transformer2DModel`` (the hub's PixArt and DiT
repos) is built as the class diffusers loads it as (:func:`component_class`).

A whole pipeline directory is :mod:`mobius_diffusion.pipeline_source`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mobius.errors import ConfigError, MobiusError, ModelSourceError
from mobius.source import ModelSource, read_json

#: ``config.json`` spellings of the build dtypes, as ``ModelSource.stored_dtype`` names them.
_DTYPE_NAMES = {"FLOAT": "float32", "FLOAT16": "float16", "BFLOAT16": "bfloat16"}


#: diffusers' legacy classes and, by the config's ``norm_type``, the class diffusers loads
#: such a config as (its ``_CLASS_REMAPPING_DICT``); the checkpoint keys are that class's.
LEGACY_CLASSES = {
    "Transformer2DModel": {
        "ada_norm_zero": "DiTTransformer2DModel",
        "ada_norm_single": "PixArtTransformer2DModel",
    }
}


def component_class(class_name: str, config: dict) -> str:
    """The class a component builds as: ``class_name``, or for a legacy class the one diffusers picks.

    A legacy ``Transformer2DModel`` config is a PixArt transformer with ``norm_type``
    ``ada_norm_single`` and a DiT one with ``ada_norm_zero`` (``num_embeds_ada_norm``
    is then checked by DiT's config); any other (the plain spatial transformer of
    ``layer_norm``, the default) is refused by name.
    """
    remapped = LEGACY_CLASSES.get(class_name)
    if remapped is None:
        return class_name
    norm_type = config.get("norm_type", "layer_norm")
    if not isinstance(norm_type, str) or norm_type not in remapped:
        kinds = ", ".join(f"{norm} ({name})" for norm, name in remapped.items())
        raise ConfigError(
            f"a {class_name} with norm_type {norm_type!r} is not built; mobius builds it with "
            f"norm_type {kinds}, as diffusers loads those"
        )
    return remapped[norm_type]


def recognise_component(path: Path, options, registry) -> ModelSource | None:
    """The source of a diffusers component directory (``config.json`` with ``_class_name``, no ``model_type``).

    The key is ``options.model_type`` when given (a pipeline's component), else the
    config's ``_class_name``; an unknown key fails on the registry's clear error.
    """
    config_path = path / "config.json"
    if not path.is_dir() or not config_path.is_file():
        return None
    try:
        raw = read_json(config_path)
    except MobiusError:
        return None  # core's reader reports it
    class_name = raw.get("_class_name")
    if raw.get("model_type") or not isinstance(class_name, str):
        return None
    from mobius.weights import open_checkpoint
    from mobius_diffusion.config import ComponentConfig

    entry = registry.get(options.model_type or component_class(class_name, raw))
    dtype = raw.get("torch_dtype") or raw.get("dtype")
    return ModelSource(
        path=path,
        entry=entry,
        hf_config=ComponentConfig(raw),
        checkpoint=lambda: open_checkpoint(path, allow_pickle=options.allow_pickle),
        source_dir=path,
        stored_dtype=dtype if isinstance(dtype, str) else None,
    )


def weights_file_config(registry, path: Path, checkpoint) -> tuple[Any, Any]:
    """The registration and config of a lone ``.safetensors`` file, told by its tensors alone.

    Some checkpoints ship as one weights file with no config (IP-Adapters): a
    family of this package that can recognise them has a ``config_from_weights(shapes)``
    returning its config fields (``model_type`` included), or None when the tensors
    are not its.
    """
    from mobius_diffusion.config import ComponentConfig
    from mobius_diffusion.plugin import PACKAGE

    shapes = {name: tuple(tensor.shape) for name, tensor in checkpoint.items()}
    for entry in registry.by_package().get(PACKAGE, []):
        recognise = getattr(entry.module_class(), "config_from_weights", None)
        fields = recognise(shapes) if recognise is not None else None
        if fields is not None:
            return entry, ComponentConfig({"_class_name": fields.pop("model_type"), **fields})
    raise ModelSourceError(
        f"{path} is a lone safetensors file, and no installed mobius package recognises its "
        "tensors without a config.json; give the model's directory (config.json beside the weights)"
    )


def recognise_weights_file(path: Path, options, registry) -> ModelSource | None:
    """The source of a lone ``.safetensors`` file: see :func:`weights_file_config`."""
    if not path.is_file() or path.suffix != ".safetensors":
        return None
    from mobius.weights import SafetensorsCheckpoint, checkpoint_dtype

    checkpoint = SafetensorsCheckpoint.open(path)
    entry, config = weights_file_config(registry, path, checkpoint)
    dtype = checkpoint_dtype(checkpoint)
    return ModelSource(
        path=path,
        entry=entry,
        hf_config=config,
        checkpoint=lambda: checkpoint,
        source_dir=None,
        stored_dtype=_DTYPE_NAMES.get(dtype.name) if dtype is not None else None,
    )
