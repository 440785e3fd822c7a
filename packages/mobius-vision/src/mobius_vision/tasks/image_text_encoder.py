"""The image-text-encoder contract: a vision–language decoder's token states over a prompt
with images, for a diffusion pipeline that conditions on them (Qwen-Image Edit).

One graph, ``model.onnx``. Inputs: ``input_ids`` and ``attention_mask`` int64 [batch,
sequence] (the processor's, each image's placeholder expanded to its token count),
``position_ids`` int64 in the module's shape (M-RoPE: [3, batch, sequence], the model's
``get_rope_index``), and the processor's image inputs as the module lists them
(Qwen2.5-VL: ``pixel_values`` [num_patches, patch_width], ``image_grid_thw`` int64
[num_images, 3]; every image of the batch, in the order of the placeholders). Outputs:
``last_hidden_state`` [batch, sequence, hidden] and, as the ``text-encoder`` task
(:mod:`mobius_text.text_encoder`), the ``hidden_states.{i}`` a build selects.

The module (a decoder text encoder that also reads images) declares
``image_inputs(dtype)``, ``position_ids_shape()`` and ``output_shapes()``, and
returns a dict of its outputs.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks import IR_VERSION, set_output
from mobius_text.text_encoder import TextEncoderTask

INT64 = ir.DataType.INT64


class ImageTextEncoderTask(TextEncoderTask):
    """The text-encoder task's options and outputs, over a prompt with images."""

    name = "image-text-encoder"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        graph, builder = self.new_graph("image_text_encoder")
        input_ids = builder.input("input_ids", INT64, ["batch", "sequence"])
        attention_mask = builder.input("attention_mask", INT64, ["batch", "sequence"])
        position_ids = builder.input("position_ids", INT64, module.position_ids_shape())
        images = [builder.input(name, t, shape) for name, t, shape in module.image_inputs(dtype)]
        outputs = module(builder.op, input_ids, attention_mask, position_ids, *images)
        shape = ["batch", "sequence", config.hidden_size]
        set_output(builder, outputs["last_hidden_state"], "last_hidden_state", dtype, shape)
        for name, extra in module.output_shapes().items():
            set_output(builder, outputs[name], name, dtype, extra)
        return {"model": ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")}
