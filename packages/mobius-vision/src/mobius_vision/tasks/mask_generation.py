"""The promptable mask-generation contract (Segment Anything): two graphs, as SAM is deployed.

The image is encoded once; each prompt then runs the small decoder.

``image_encoder/model.onnx``:

- input ``pixel_values`` float [batch, num_channels, size, size] (the config's image
  size, 1024 for SAM: the longest side resized to it, normalised, zero-padded);
- outputs named after transformers' fields: ``image_embeddings`` [batch, C, h, w]
  (``h = size / patch_size``) and whatever else the family's decoder reads per image
  (the module's ``image_outputs()``).

``prompt_decoder/model.onnx`` (prompt encoder and mask decoder):

- the image encoder's outputs, as inputs of the same names and shapes;
- ``input_points`` float [batch, point_batch, points, 2]: (x, y) in pixels of the
  resized image (transformers' ``SamProcessor`` gives them so);
- ``input_labels`` int64 [batch, point_batch, points]: 1 foreground, 0 background,
  -1 not a point, -10 padding (ignored);
- ``input_boxes`` float [batch, boxes, 4]: (x0, y0, x1, y1) in the same pixels, one
  box per prompt (``boxes == point_batch``) or none (``boxes == 0``: a zero-sized
  input, which is how "no box" is said). A box-only prompt passes points of shape
  [batch, boxes, 0, 2]. Without a box the graph appends transformers' padding point.
- outputs ``pred_masks`` float [batch, point_batch, num_masks, 4h, 4w] (low-resolution
  mask logits: 256x256 for SAM; upscale, crop and resize them as transformers'
  ``post_process_masks`` does) and ``iou_scores`` [batch, point_batch, num_masks].

``multimask_output`` is fixed at build to transformers' default, True: three masks per
prompt for SAM. ``input_masks`` (a previous mask as a dense prompt) is not part of the
contract yet: the dense prompt is the no-mask embedding.

Module hooks: ``image_outputs()`` (names and shapes), ``encode_image(op, pixel_values)``
(a dict of them), ``decode_prompts(op, image_outputs, points, labels, boxes)`` (a dict of
``pred_masks`` and ``iou_scores``), ``num_masks`` and ``mask_size``; the config gives
``image_size`` and ``num_channels``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks import IR_VERSION, ModelTask, set_output, twin_module
from mobius_vision.processing._settings import keep_processor_config

INT64 = ir.DataType.INT64
#: The package's two graphs.
IMAGE_ENCODER, PROMPT_DECODER = "image_encoder", "prompt_decoder"


def _model(graph) -> ir.Model:
    return ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")


class MaskGenerationTask(ModelTask):
    """``image_encoder/model.onnx`` and ``prompt_decoder/model.onnx`` (module docstring)."""

    name = "mask-generation"

    def configure(self, config, options, source):
        """The config as it is; the source's ``processor_config.json`` is kept for the runner
        (transformers 5 saves SAM's image processor settings there)."""
        config = super().configure(config, options, source)
        keep_processor_config(source)
        return config

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        return {
            f"{IMAGE_ENCODER}/model": self._image_encoder(module, config, dtype),
            f"{PROMPT_DECODER}/model": self._prompt_decoder(twin_module(module), dtype),
        }

    def _image_encoder(self, module, config, dtype) -> ir.Model:
        graph, builder = self.new_graph(IMAGE_ENCODER)
        height, width = config.image_size
        pixel_values = builder.input(
            "pixel_values", dtype, ["batch", config.num_channels, height, width]
        )
        outputs = module.encode_image(builder.op, pixel_values)
        for name, shape in module.image_outputs().items():
            set_output(builder, outputs[name], name, dtype, shape)
        return _model(graph)

    def _prompt_decoder(self, module, dtype) -> ir.Model:
        graph, builder = self.new_graph(PROMPT_DECODER)
        image = {
            name: builder.input(name, dtype, shape)
            for name, shape in module.image_outputs().items()
        }
        points = builder.input("input_points", dtype, ["batch", "point_batch", "points", 2])
        labels = builder.input("input_labels", INT64, ["batch", "point_batch", "points"])
        boxes = builder.input("input_boxes", dtype, ["batch", "boxes", 4])
        outputs = module.decode_prompts(builder.op, image, points, labels, boxes)
        size, masks = module.mask_size, module.num_masks
        shapes = {
            "pred_masks": ["batch", "point_batch", masks, size, size],
            "iou_scores": ["batch", "point_batch", masks],
        }
        for name, shape in shapes.items():
            set_output(builder, outputs[name], name, dtype, shape)
        return _model(graph)
