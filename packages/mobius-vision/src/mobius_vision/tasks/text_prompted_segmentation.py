"""The text-prompted segmentation contract (CLIPSeg): a mask of whatever each text prompt names.

Named for what the user gives (free text, one mask per prompt), apart from
``semantic-segmentation`` (a fixed label set, a class per pixel) and ``mask-generation``
(point and box prompts). Two graphs, split as a deployment uses them: the prompts are
embedded once, then every image is segmented for each of them.

``text/model.onnx``

- inputs ``input_ids`` int64 [prompts, sequence], ``attention_mask`` int64 [prompts,
  sequence] (one row per prompt, padded at the end);
- output ``conditional_embeddings`` [prompts, projection_dim]: each prompt's conditional
  embedding, as transformers' ``CLIPSegForImageSegmentation.get_conditional_embeddings``
  computes it (the pooled text state, projected; not normalised).

``image/model.onnx``

- inputs ``pixel_values`` float [batch, num_channels, height, width] at the image
  processor's size (the ``size`` of the checkpoint's ``preprocessor_config.json``, or of the
  ``image_processor`` in its ``processor_config.json``; else the vision config's
  ``image_size``), and ``conditional_embeddings`` [prompts, projection_dim] (from the text
  graph, or any embedding of that width: transformers also takes an image's);
- output ``logits`` [batch, prompts, mask_height, mask_width]: every image against every
  prompt, before the sigmoid. transformers pairs the i-th image with the i-th prompt
  (``logits [batch, h, w]``): that is the diagonal ``logits[i, i]`` here; the cross product
  runs the vision tower once per image however many prompts there are.

``mobius segment PKG IMAGE --labels "a cat,a remote"``
(:mod:`mobius_vision.text_prompted_segmentation_runner`) writes a mask PNG per label.

Module hooks: ``embed_prompts(op, input_ids, attention_mask)`` -> the embeddings;
``segment(op, pixel_values, conditional_embeddings)`` -> ``logits``; the config's
``with_image_size(size)``, ``projection_dim`` and ``mask_side``.
"""

from __future__ import annotations

from pathlib import Path

import onnx_ir as ir

from mobius.tasks import set_output
from mobius_vision.processing._settings import read_json_object
from mobius_vision.tasks.semantic_segmentation import fixed_image_size, processor_image_size
from mobius_vision.tasks.zero_shot_detection import (
    IMAGE_GRAPH,
    INT64,
    TEXT_GRAPH,
    ZeroShotObjectDetectionTask,
    _model,
)


def source_image_size(source_dir) -> tuple[int, int] | None:
    """The fixed size the source's image processor resizes to: ``preprocessor_config.json``'s,
    else that of the ``image_processor`` nested in ``processor_config.json`` (as transformers
    5 saves a processor); None without either."""
    if source_dir is None:
        return None
    size = processor_image_size(source_dir)
    if size is None:
        path = Path(source_dir) / "processor_config.json"
        size = fixed_image_size(read_json_object(path).get("image_processor"), path)
    return size


class TextPromptedSegmentationTask(ZeroShotObjectDetectionTask):
    """``text/model.onnx`` and ``image/model.onnx`` (module docstring): the zero-shot
    detectors' split and build, with this contract's hooks and the processor's image size."""

    name = "text-prompted-segmentation"

    def configure(self, config, options, source):
        """The config at the image processor's size (the source's ``processor_config.json``
        is kept for the runner)."""
        config = super().configure(config, options, source)
        size = source_image_size(getattr(source, "source_dir", None))
        return config.with_image_size(size or config.image_size)

    def _text(self, module, config, dtype) -> ir.Model:
        graph, builder = self.new_graph(TEXT_GRAPH)
        input_ids = builder.input("input_ids", INT64, ["prompts", "sequence"])
        attention_mask = builder.input("attention_mask", INT64, ["prompts", "sequence"])
        embeddings = module.embed_prompts(builder.op, input_ids, attention_mask)
        shape = ["prompts", config.projection_dim]
        set_output(builder, embeddings, "conditional_embeddings", dtype, shape)
        return _model(graph)

    def _image(self, module, config, dtype) -> ir.Model:
        graph, builder = self.new_graph(IMAGE_GRAPH)
        height, width = config.image_size
        pixel_values = builder.input(
            "pixel_values", dtype, ["batch", config.num_channels, height, width]
        )
        prompts = builder.input("conditional_embeddings", dtype, ["prompts", config.projection_dim])
        logits = module.segment(builder.op, pixel_values, prompts)
        side = config.mask_side
        set_output(builder, logits, "logits", dtype, ["batch", "prompts", side, side])
        return _model(graph)
