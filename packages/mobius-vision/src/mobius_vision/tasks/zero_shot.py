"""The zero-shot image-classification contract of dual encoders (CLIP, SigLIP): image–text similarity.

Inputs: ``input_ids`` int64 [text_batch, sequence]; ``attention_mask`` int64
[text_batch, sequence], unless the module says it reads none
(``uses_attention_mask = False``); ``pixel_values`` float
[image_batch, num_channels, height, width] at the config's ``image_size``.
Outputs, as transformers' ``CLIPModel`` / ``SiglipModel`` name them:

- ``logits_per_image`` [image_batch, text_batch]: the scaled cosine similarities
  (SigLIP adds its ``logit_bias``);
- ``logits_per_text`` [text_batch, image_batch]: the same, transposed;
- ``text_embeds`` [text_batch, projection_dim] and ``image_embeds``
  [image_batch, projection_dim], L2-normalised.

The module takes ``(input_ids, attention_mask or None, pixel_values)`` and returns a
dict of those four; the config gives ``image_size``, ``num_channels`` and
``projection_dim``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks import IR_VERSION, ModelTask, set_output

INT64 = ir.DataType.INT64


class ZeroShotImageClassificationTask(ModelTask):
    """One graph: both towers, their normalised embeddings and the similarity logits."""

    name = "zero-shot-image-classification"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        graph, builder = self.new_graph("zero_shot_image_classification")
        input_ids = builder.input("input_ids", INT64, ["text_batch", "sequence"])
        attention_mask = None
        if getattr(module, "uses_attention_mask", True):
            attention_mask = builder.input("attention_mask", INT64, ["text_batch", "sequence"])
        height, width = config.image_size
        pixel_values = builder.input(
            "pixel_values", dtype, ["image_batch", config.num_channels, height, width]
        )
        outputs = module(builder.op, input_ids, attention_mask, pixel_values)
        dim = config.projection_dim
        shapes = {
            "logits_per_image": ["image_batch", "text_batch"],
            "logits_per_text": ["text_batch", "image_batch"],
            "text_embeds": ["text_batch", dim],
            "image_embeds": ["image_batch", dim],
        }
        for name, shape in shapes.items():
            set_output(builder, outputs[name], name, dtype, shape)
        return {"model": ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")}
