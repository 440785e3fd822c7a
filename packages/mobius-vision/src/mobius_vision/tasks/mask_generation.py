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
- ``input_masks`` float [batch, 1, 4h, 4w]: a mask prompt per image, low-resolution mask
  logits as ``pred_masks`` gives them (256x256 for SAM; transformers' ``input_masks``),
  and ``has_input_mask`` float [batch]: 1 where the image's mask is a prompt, 0 where it
  has none (the mask's values are then not read: pass zeros). Both are always fed, so
  that one graph serves both cases, as in the original SAM's ONNX export
  (``mask_input``, ``has_mask_input``); ``has_input_mask`` 0 is transformers'
  ``input_masks=None`` (the learned no-mask embedding).
- outputs ``pred_masks`` float [batch, point_batch, num_masks, 4h, 4w] (low-resolution
  mask logits: 256x256 for SAM; upscale, crop and resize them as transformers'
  ``post_process_masks`` does) and ``iou_scores`` [batch, point_batch, num_masks];
  SAM 2 adds ``object_score_logits`` [batch, point_batch, 1] (the object is in the
  image where it is above 0; the masks are not suppressed by it, as in transformers'
  ``Sam2Model``).

``multimask_output`` is fixed at build to transformers' default, True: three masks per
prompt for SAM. Iterative refinement, as SAM's predictor examples do it: run the decoder
again with the best mask of the last run as ``input_masks`` (``has_input_mask`` 1).

Module hooks: ``image_outputs()`` and ``prompt_outputs()`` (names and shapes),
``encode_image(op, pixel_values)`` (a dict of the image outputs),
``decode_prompts(op, image_outputs, prompt)`` (``prompt``: the prompt inputs by name; a
dict of the prompt outputs), ``num_masks`` and ``mask_size``; the config gives
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
        size = module.mask_size
        prompt_inputs = {
            "input_points": (dtype, ["batch", "point_batch", "points", 2]),
            "input_labels": (INT64, ["batch", "point_batch", "points"]),
            "input_boxes": (dtype, ["batch", "boxes", 4]),
            "input_masks": (dtype, ["batch", 1, size, size]),
            "has_input_mask": (dtype, ["batch"]),
        }
        prompt = {
            name: builder.input(name, kind, shape) for name, (kind, shape) in prompt_inputs.items()
        }
        outputs = module.decode_prompts(builder.op, image, prompt)
        for name, shape in module.prompt_outputs().items():
            set_output(builder, outputs[name], name, dtype, shape)
        return _model(graph)
