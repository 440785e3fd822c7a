"""An IP-Adapter in a whole-pipeline build: ``mobius build --model sd/ out/ --ip-adapter FILE``.

An IP-Adapter checkpoint is one ``.safetensors`` file with two halves, and the build
puts each where diffusers' ``load_ip_adapter`` puts it:

- ``ip_adapter.*`` (the ``to_k_ip``/``to_v_ip`` of every cross-attention) into the
  ``unet``, built with the option ``--ip-adapter`` (build option
  :data:`~mobius_diffusion.tasks.IP_ADAPTER_OPTION`), which only the unet keeps;
- ``image_proj.*`` into a component of its own, :data:`IP_ADAPTER_COMPONENT` (``ip_adapter/``:
  ``model.onnx``, an :class:`~mobius_diffusion.models.ip_adapter.IPAdapterImageProjection`,
  and a ``config.json`` saying so), which the runner finds there.

Each half fails its build on any tensor it does not read, so every tensor of the file is
used or named. The image goes through the pipeline's ``image_encoder`` (a
``CLIPVisionModelWithProjection``), which the pipeline must have unless the adapter is a
FaceID one (it reads a face embedding the caller gives, no image).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from mobius.errors import ConfigError
from mobius_diffusion.pipelines.ip_adapter import IP_ADAPTER_COMPONENT
from mobius_diffusion.tasks import IP_ADAPTER_OPTION

__all__ = [
    "IP_ADAPTER_COMPONENT",
    "build_image_projection",
    "check_ip_adapter_plan",
    "ip_adapter_plugin",
]


def ip_adapter_plugin(plugin: dict, component: str) -> dict:
    """The plugin options of pipeline component ``component``: ``--ip-adapter`` is the unet's."""
    if component == "unet":
        return plugin
    return {k: v for k, v in plugin.items() if k != IP_ADAPTER_OPTION}


def check_ip_adapter_plan(plugin: dict, built: set[str]) -> Path | None:
    """The adapter file of a pipeline build with ``--ip-adapter``, else None.

    Raises:
        ConfigError: no such file, or a pipeline without the ``unet`` it goes into or
            the ``image_encoder`` its image goes through.
    """
    path = plugin.get(IP_ADAPTER_OPTION)
    if path is None:
        return None
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--ip-adapter {path}: no such file")
    needs = [("unet", "the UNet that takes its image attention")]
    if _kind(path) != "faceid":  # FaceID reads a face embedding, no image
        needs.append(("image_encoder", "the CLIPVisionModelWithProjection that encodes its image"))
    for needed, why in needs:
        if needed not in built:
            raise ConfigError(f"--ip-adapter: this pipeline has no {needed} ({why})")
    return path


def _kind(path: Path) -> str | None:
    """The kind of image projection of adapter file ``path`` (None: not a safetensors file of one)."""
    from mobius.weights import SafetensorsCheckpoint
    from mobius_diffusion.models.ip_adapter import image_proj_layout

    if path.suffix != ".safetensors":
        return None
    shapes = {name: tuple(t.shape) for name, t in SafetensorsCheckpoint.open(path).items()}
    layout = image_proj_layout(shapes)
    return None if layout is None else layout["kind"]


def build_image_projection(path: Path, options, registry):
    """The package of the adapter file's image projection (``image_proj.*``), with its
    ``config.json`` (the layout read from the tensors) as a text file."""
    from mobius_diffusion.source import recognise_weights_file

    # the pipeline's own options (--ip-adapter, --skip-component...) are none of the projection's
    part_options = dataclasses.replace(options, model_type=None, plugin={})
    source = recognise_weights_file(path, part_options, registry)
    if source is None or source.entry.key != "IPAdapterImageProjection":
        raise ConfigError(f"--ip-adapter {path.name} is not an IP-Adapter checkpoint")
    part = source.build(part_options, registry)
    config = {k: v for k, v in source.hf_config.to_dict().items() if k != "model_type"}
    part.text_files["config.json"] = json.dumps(config, indent=2) + "\n"
    return part
