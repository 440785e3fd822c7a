"""The universal-segmentation contract: a class and a mask for each of a fixed set of queries,
as MaskFormer predicts them (one set of outputs for semantic, instance and panoptic results).

Input: ``pixel_values`` float [batch, num_channels, height, width]; ``height`` and ``width``
are symbolic (MaskFormer's processor resizes each image by its shortest edge and pads the
batch; the convolutional backbones take any size). The padding mask transformers accepts is
not read by MaskFormer, so the graph does not take one.

Outputs, as transformers' ``MaskFormerForInstanceSegmentation`` returns them (no softmax or
sigmoid applied):

- ``class_queries_logits`` [batch, queries, num_labels + 1]: the last class is "no object";
- ``masks_queries_logits`` [batch, queries, height', width']: each query's mask logits at
  the pixel decoder's resolution (a quarter of the input for a ResNet backbone).

``mobius segment`` (:mod:`mobius_vision.universal_segmentation_runner`) turns them into a
class map as ``post_process_semantic_segmentation`` does: the softmax of the classes (no
"no object") times the sigmoid of the masks, summed over the queries, upsampled to each
image's size, argmax.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.model import Model
from mobius.tasks import IR_VERSION, ModelTask, set_output

#: The graph outputs of the contract, in order.
UNIVERSAL_SEGMENTATION_OUTPUTS = ("class_queries_logits", "masks_queries_logits")


class UniversalSegmentationModel(Model):
    """Base of the universal-segmentation families: the outputs' shapes from
    :meth:`num_queries` and :meth:`num_classes`, and ``forward(op, pixel_values)`` returning
    both outputs by name."""

    task = "universal-segmentation"

    def num_queries(self) -> int:
        raise NotImplementedError

    def num_classes(self) -> int:
        """The class logits per query: the labels and "no object"."""
        return self.config.num_labels + 1

    def output_shapes(self) -> dict[str, list]:
        queries = self.num_queries()
        return {
            "class_queries_logits": ["batch", queries, self.num_classes()],
            "masks_queries_logits": ["batch", queries, "mask_height", "mask_width"],
        }


class UniversalSegmentationTask(ModelTask):
    """One graph: ``pixel_values`` -> ``class_queries_logits``, ``masks_queries_logits``.

    The module (a :class:`UniversalSegmentationModel`) returns both outputs by name and
    says their shapes in ``output_shapes()``.
    """

    name = "universal-segmentation"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        graph, builder = self.new_graph("universal_segmentation")
        pixel_values = builder.input(
            "pixel_values", dtype, ["batch", config.num_channels, "height", "width"]
        )
        outputs = module(builder.op, pixel_values)
        shapes = module.output_shapes()
        for name in UNIVERSAL_SEGMENTATION_OUTPUTS:
            set_output(builder, outputs[name], name, dtype, shapes[name])
        return {"model": ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")}
