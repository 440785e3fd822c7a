"""The zero-shot object-detection contract (OWL-ViT, OWLv2, Grounding DINO): boxes found by
free-text queries.

Two graphs, split as a deployment uses them: the queries are embedded once, then every
image is scored against them. OWL-ViT's form comes first; Grounding DINO's (the grounded
form, whose image graph fuses the prompt's tokens with the pixels) follows.

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

**The grounded form** (Grounding DINO; modules subclassing :class:`GroundedDetectionModel`).
The queries are one prompt of phrases ("a cat. a remote control."), and the image graph
needs every token's features, not one embedding per query: the pixels and the tokens
attend to each other in the encoder, the decoder attends to the tokens, and each box is
scored against each token.

``text/model.onnx``

- inputs ``input_ids``, ``attention_mask`` int64 [batch, sequence] (one prompt per image,
  padded at the end; at most the config's ``max_text_len`` tokens);
- outputs ``text_features`` float [batch, sequence, d_model] (the text encoder's states,
  projected), ``text_self_attention_mask`` bool [batch, sequence, sequence] (which tokens
  each token attends to: those of its own phrase) and ``text_position_ids`` int64
  [batch, sequence] (each token's place in its phrase). Both come from the token ids
  alone, computed in the graph, so a runtime only tokenises.

``image/model.onnx``

- inputs ``pixel_values`` float [batch, num_channels, height, width] (any size unless the
  family fixes it: :meth:`GroundedDetectionModel.image_dims`), ``pixel_mask`` int64
  [batch, height, width] (1 on the image, 0 on the padding the processor added at the
  bottom and right), the text graph's three outputs and the prompt's ``attention_mask``
  (row ``i`` of the text is image ``i``'s prompt);
- outputs ``logits`` [batch, queries, max_text_len] (each query against each token, before
  the sigmoid; ``-inf`` on padded tokens and past the prompt) and ``pred_boxes``
  [batch, queries, 4] (``(center_x, center_y, width, height)`` normalised to the image
  without its padding).

Why this split: the text graph is everything that depends on the prompt only (BERT and
the phrase masks), the image graph everything that depends on the image, which is
all of the rest since the fusion starts in the encoder's first layer.

Module hooks: ``encode_text(op, input_ids, attention_mask)`` -> a dict of the text graph's
outputs; ``text_outputs()`` -> their names, dtypes and shapes; ``detect(op,
pixel_values, pixel_mask, text)`` (``text``: the text outputs and ``attention_mask`` by
name) -> ``{"logits", "pred_boxes"}``; ``image_outputs()``; ``image_dims()``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.model import Model
from mobius.tasks import IR_VERSION, ModelTask, set_output, twin_module
from mobius_vision.processing._settings import keep_processor_config

INT64 = ir.DataType.INT64
#: The package's two graphs.
TEXT_GRAPH, IMAGE_GRAPH = "text", "image"


def _model(graph) -> ir.Model:
    return ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")


class GroundedDetectionModel(Model):
    """Base of the grounded families (module docstring): the hooks of that form."""

    task = "zero-shot-object-detection"

    def image_dims(self) -> list:
        """``[height, width]`` of ``pixel_values``: symbolic by default."""
        return ["height", "width"]

    def text_outputs(self) -> dict[str, tuple[ir.DataType | None, list]]:
        """The text graph's outputs: ``(dtype, shape)`` by name (``None``: the model's float)."""
        raise NotImplementedError

    def image_outputs(self) -> dict[str, list]:
        """The image graph's outputs and their shapes."""
        raise NotImplementedError


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
        if isinstance(module, GroundedDetectionModel):
            return {
                f"{TEXT_GRAPH}/model": self._grounded_text(module, dtype),
                f"{IMAGE_GRAPH}/model": self._grounded_image(twin_module(module), config, dtype),
            }
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

    def _grounded_text(self, module, dtype) -> ir.Model:
        graph, builder = self.new_graph(TEXT_GRAPH)
        input_ids = builder.input("input_ids", INT64, ["batch", "sequence"])
        attention_mask = builder.input("attention_mask", INT64, ["batch", "sequence"])
        outputs = module.encode_text(builder.op, input_ids, attention_mask)
        for name, (kind, shape) in module.text_outputs().items():
            set_output(builder, outputs[name], name, kind or dtype, shape)
        return _model(graph)

    def _grounded_image(self, module, config, dtype) -> ir.Model:
        graph, builder = self.new_graph(IMAGE_GRAPH)
        height, width = module.image_dims()
        pixel_values = builder.input(
            "pixel_values", dtype, ["batch", config.num_channels, height, width]
        )
        pixel_mask = builder.input("pixel_mask", INT64, ["batch", height, width])
        text = {
            name: builder.input(name, kind or dtype, shape)
            for name, (kind, shape) in module.text_outputs().items()
        }
        text["attention_mask"] = builder.input("attention_mask", INT64, ["batch", "sequence"])
        outputs = module.detect(builder.op, pixel_values, pixel_mask, text)
        for name, shape in module.image_outputs().items():
            set_output(builder, outputs[name], name, dtype, shape)
        return _model(graph)
