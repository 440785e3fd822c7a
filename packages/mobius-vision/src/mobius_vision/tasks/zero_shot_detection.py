"""The zero-shot object-detection contract (OWL-ViT, OWLv2): boxes found by free-text queries.

Two graphs, split as a deployment uses them: the queries are embedded once, then every
image is scored against them.

``text/model.onnx``

- inputs ``input_ids`` int64 [texts, sequence], ``attention_mask`` int64 [texts, sequence]
  (one row per query text, padded at the end);
- output ``text_embeds`` [texts, projection_dim]: each query's projected, L2-normalised
  embedding (transformers' ``text_embeds``).

``image/model.onnx``

- inputs ``pixel_values`` float [batch, num_channels, height, width] at the config's
  ``image_size``, and ``text_embeds`` [texts, projection_dim] from the text graph (the same
  queries for every image of the batch; every row is a live query: a runtime that pads
  its queries drops the padded columns of ``logits``);
- outputs, as transformers' ``OwlViTForObjectDetection`` names them:
  ``logits`` [batch, patches, texts] (before the sigmoid), ``pred_boxes`` [batch, patches, 4]
  (``(center_x, center_y, width, height)`` normalised to [0, 1] of the processed image),
  ``class_embeds`` [batch, patches, projection_dim] (normalised) and ``image_embeds``
  [batch, patches_high, patches_wide, hidden] (the feature map); OWLv2 adds
  ``objectness_logits`` [batch, patches].

The logits sit in the image graph (it takes the text embeddings) rather than a third graph:
they need the per-patch class embeddings, logit shift and scale, which would otherwise
leave the image graph as three outputs only to be multiplied elsewhere.

Module hooks: ``embed_texts(op, input_ids, attention_mask)`` -> ``text_embeds``;
``detect(op, pixel_values, text_embeds)`` -> a dict of the image graph's outputs;
``image_outputs()`` -> their names and shapes.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks import IR_VERSION, ModelTask, set_output, twin_module
from mobius_vision.processing._settings import keep_processor_config

INT64 = ir.DataType.INT64
#: The package's two graphs.
TEXT_GRAPH, IMAGE_GRAPH = "text", "image"


def _model(graph) -> ir.Model:
    return ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")


class ZeroShotObjectDetectionTask(ModelTask):
    """``text/model.onnx`` and ``image/model.onnx`` (module docstring)."""

    name = "zero-shot-object-detection"

    def configure(self, config, options, source):
        """The config as it is; the source's ``processor_config.json`` is kept for the runner
        (transformers 5 saves the image processor's settings there, not in
        ``preprocessor_config.json``)."""
        config = super().configure(config, options, source)
        keep_processor_config(source)
        return config

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        return {
            f"{TEXT_GRAPH}/model": self._text(module, config, dtype),
            f"{IMAGE_GRAPH}/model": self._image(twin_module(module), config, dtype),
        }

    def _text(self, module, config, dtype) -> ir.Model:
        graph, builder = self.new_graph(TEXT_GRAPH)
        input_ids = builder.input("input_ids", INT64, ["texts", "sequence"])
        attention_mask = builder.input("attention_mask", INT64, ["texts", "sequence"])
        text_embeds = module.embed_texts(builder.op, input_ids, attention_mask)
        set_output(builder, text_embeds, "text_embeds", dtype, ["texts", config.projection_dim])
        return _model(graph)

    def _image(self, module, config, dtype) -> ir.Model:
        graph, builder = self.new_graph(IMAGE_GRAPH)
        height, width = config.image_size
        pixel_values = builder.input(
            "pixel_values", dtype, ["batch", config.num_channels, height, width]
        )
        text_embeds = builder.input("text_embeds", dtype, ["texts", config.projection_dim])
        outputs = module.detect(builder.op, pixel_values, text_embeds)
        for name, shape in module.image_outputs().items():
            set_output(builder, outputs[name], name, dtype, shape)
        return _model(graph)
