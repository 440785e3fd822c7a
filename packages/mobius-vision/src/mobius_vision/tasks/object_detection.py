"""The object-detection contract: a set of class scores and boxes per image, as DETR predicts them.

Inputs:

- ``pixel_values`` float [batch, num_channels, height, width]; ``height`` and
  ``width`` are symbolic where the family takes any size (DETR: its processor
  resizes each image by its edges and pads the batch to the largest), fixed where
  the module says so (:meth:`image_dims`);
- ``pixel_mask`` int64 [batch, height, width], only for the families that take it
  (:attr:`takes_pixel_mask`): 1 on the image, 0 on the padding the processor added
  at the bottom and right.

Outputs, as transformers' ``XxxForObjectDetection`` returns them (before any softmax
or sigmoid):

- ``logits`` [batch, queries, classes]: DETR's families add a last "no object" class
  (``num_labels + 1``) and score with a softmax; the sigmoid families (Deformable
  DETR, RT-DETR, D-FINE) have ``num_labels`` classes;
- ``pred_boxes`` [batch, queries, 4]: ``(center_x, center_y, width, height)``
  normalised to [0, 1] by the size of each image without its padding.

Hooks a module of this task declares (see :class:`DetectionModel`):
``takes_pixel_mask``, :meth:`image_dims`, :meth:`output_shapes`, and
``__call__(op, pixel_values[, pixel_mask])`` returning ``{"logits", "pred_boxes"}``.
"""

from __future__ import annotations

from typing import ClassVar

import onnx_ir as ir

from mobius.model import Model
from mobius.tasks import IR_VERSION, ModelTask, set_output

#: The graph outputs of the contract, in order.
DETECTION_OUTPUTS = ("logits", "pred_boxes")


class DetectionModel(Model):
    """Base of the object-detection families: the task's hooks with their defaults."""

    task = "object-detection"
    #: Whether the graph takes ``pixel_mask`` (the processor pads a batch to its largest).
    takes_pixel_mask: ClassVar[bool] = True

    def image_dims(self) -> list:
        """``[height, width]`` of ``pixel_values``: symbolic (any size) by default."""
        return ["height", "width"]

    def output_shapes(self) -> dict[str, list]:
        """``logits`` and ``pred_boxes`` with their (symbolic) shapes."""
        raise NotImplementedError


class ObjectDetectionTask(ModelTask):
    """One graph: ``pixel_values`` (+ ``pixel_mask``) -> ``logits``, ``pred_boxes``."""

    name = "object-detection"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        graph, builder = self.new_graph("object_detection")
        height, width = module.image_dims()
        channels = config.num_channels
        inputs = [builder.input("pixel_values", dtype, ["batch", channels, height, width])]
        if module.takes_pixel_mask:
            inputs.append(builder.input("pixel_mask", ir.DataType.INT64, ["batch", height, width]))
        outputs = module(builder.op, *inputs)
        shapes = module.output_shapes()
        for name in DETECTION_OUTPUTS:
            set_output(builder, outputs[name], name, dtype, shapes[name])
        return {"model": ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")}
