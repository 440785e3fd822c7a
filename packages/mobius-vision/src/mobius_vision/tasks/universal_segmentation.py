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

Optional input, for families that condition their queries on a task (OneFormer):
``task_inputs`` int64 [batch, task_seq_len], the token ids of "the task is semantic"
("instance", "panoptic") as OneFormerProcessor makes them: the tokenizer's ids padded to
``task_seq_len`` and multiplied by its attention mask (padding is 0). ``task_seq_len`` is
fixed by the model (its task MLP reads the ids as numbers). A module declares it with
:meth:`UniversalSegmentationModel.task_sequence_length` and takes it as ``forward``'s second
argument; the graph's inputs are then ``pixel_values``, ``task_inputs``, in that order.

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

    def task_sequence_length(self) -> int | None:
        """The length of the optional ``task_inputs`` input; None: the graph takes no task."""
        return None

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
    """One graph: ``pixel_values`` (and ``task_inputs`` where the module takes a task) ->
    ``class_queries_logits``, ``masks_queries_logits``.

    The module (a :class:`UniversalSegmentationModel`) returns both outputs by name and
    says their shapes in ``output_shapes()``.
    """

    name = "universal-segmentation"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        graph, builder = self.new_graph("universal_segmentation")
        pixel_values = builder.input(
            "pixel_values", dtype, ["batch", config.num_channels, "height", "width"]
        )
        inputs = [pixel_values]
        task_length = module.task_sequence_length()
        if task_length is not None:
            inputs.append(builder.input("task_inputs", ir.DataType.INT64, ["batch", task_length]))
        outputs = module(builder.op, *inputs)
        shapes = module.output_shapes()
        for name in UNIVERSAL_SEGMENTATION_OUTPUTS:
            set_output(builder, outputs[name], name, dtype, shapes[name])
        return {"model": ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")}
