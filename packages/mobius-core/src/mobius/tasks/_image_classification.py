"""The vision-encoder contract: image features and, with a head, class logits.

Input: ``pixel_values`` float [batch, num_channels, height, width], at the
config's ``image_size`` (position tables are built for it).
Outputs, as the module declares them in ``output_shapes()``:

- ``last_hidden_state``: [batch, tokens, hidden] for transformers (ViT: the
  class token first), [batch, channels, height', width'] for convolutional nets;
- ``pooler_output`` [batch, hidden] where the checkpoint has a pooler (or the
  family pools by definition);
- ``logits`` [batch, num_labels] with ``--head image-classification``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks._base import IR_VERSION, ModelTask, new_graph, set_output


class ImageClassificationTask(ModelTask):
    """One graph; the module takes ``pixel_values`` and returns a dict of its outputs."""

    name = "image-classification"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        graph, builder = new_graph("image_classification")
        height, width = config.image_size
        pixel_values = builder.input(
            "pixel_values", dtype, ["batch", config.num_channels, height, width]
        )
        outputs = module(builder.op, pixel_values)
        shapes = module.output_shapes()
        for name, value in outputs.items():
            set_output(builder, value, name, dtype, shapes[name])
        return {"model": ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")}
