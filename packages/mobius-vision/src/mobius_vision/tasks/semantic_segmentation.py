"""The semantic-segmentation contract: a class score for every position of a coarse grid.

Input: ``pixel_values`` float [batch, num_channels, height, width] at the build's image
size: the ``size`` (``height``/``width``) of the checkpoint's ``preprocessor_config.json``
where it has one (the size its image processor resizes every image to), else the config's
``image_size`` (SegFormer's default: 512). Position-dependent layers (token grids, Swin's
windows) are built for that size.

Output: ``logits`` float [batch, num_labels, height', width'], as transformers'
``XxxForSemanticSegmentation`` returns them (SegFormer: at a quarter of the input's
size; UperNet: already upsampled to the input's size). ``mobius segment``
(:mod:`mobius_vision.segmentation_runner`) resizes them bilinearly to each image's own
size and takes the argmax, as ``post_process_semantic_segmentation`` does.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import onnx_ir as ir

from mobius.errors import ConfigError
from mobius.tasks import IR_VERSION, ModelTask, set_output

#: The largest image side a build accepts from a ``preprocessor_config.json``.
MAX_IMAGE_SIDE = 8192


def processor_image_size(source_dir: Path | None) -> tuple[int, int] | None:
    """The fixed ``(height, width)`` a checkpoint's image processor resizes to, if it has one.

    None without a ``preprocessor_config.json``, without resizing, or with a size that is not
    fixed (``shortest_edge``). A value of the wrong type or out of range is refused: the file
    is a stranger's.
    """
    path = Path(source_dir) / "preprocessor_config.json" if source_dir else None
    if path is None or not path.is_file():
        return None
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    return fixed_image_size(settings, path)


def fixed_image_size(settings, where) -> tuple[int, int] | None:
    """The fixed ``(height, width)`` of image-processor ``settings`` (a dict read from
    ``where``), as :func:`processor_image_size` reads it."""
    if not isinstance(settings, dict) or settings.get("do_resize", True) is False:
        return None
    size = settings.get("size")
    if isinstance(size, dict) and set(size) >= {"height", "width"}:
        pair = (size["height"], size["width"])
    elif isinstance(size, int) and not isinstance(size, bool):
        pair = (size, size)
    else:
        return None
    for side in pair:
        if not isinstance(side, int) or isinstance(side, bool) or not 0 < side <= MAX_IMAGE_SIDE:
            raise ConfigError(
                f"{where}: size {size!r} is not a pair of sides in 1..{MAX_IMAGE_SIDE}"
            )
    return pair


def with_image_size(config, size: tuple[int, int]):
    """``config`` built for ``size`` (a family with nested configs defines ``with_image_size``)."""
    resize = getattr(config, "with_image_size", None)
    if resize is not None:
        return resize(size)
    return dataclasses.replace(config, image_size=size)


class SemanticSegmentationTask(ModelTask):
    """One graph: ``pixel_values`` -> ``logits`` (see the module docstring)."""

    name = "semantic-segmentation"

    def configure(self, config, options, source):
        """The config at the image processor's size; the encoder options are refused."""
        config = super().configure(config, options, source)
        size = processor_image_size(getattr(source, "source_dir", None))
        return config if size is None else with_image_size(config, size)

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        graph, builder = self.new_graph(self.name.replace("-", "_"))
        height, width = config.image_size
        pixel_values = builder.input(
            "pixel_values", dtype, ["batch", config.num_channels, height, width]
        )
        outputs = module(builder.op, pixel_values)
        shapes = module.output_shapes()
        for name, value in outputs.items():
            set_output(builder, value, name, dtype, shapes[name])
        return {"model": ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")}
