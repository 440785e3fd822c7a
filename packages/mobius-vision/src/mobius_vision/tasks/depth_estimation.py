"""The depth-estimation contract (Depth Anything, DPT, GLPN...): an image in, a depth map out.

Input: ``pixel_values`` float [batch, num_channels, height, width]. ``height`` and
``width`` are dynamic where the family interpolates its positions (DPT-style ViT
backbones: any multiple of the patch size), else fixed at the config's image size
(the module's ``fixed_image_size``).

Prompt Depth Anything takes a second input, ``prompt_depth`` float [batch, 1,
prompt_height, prompt_width]: a sparse or low-resolution metric depth (a LiDAR's), any
size; the output is then metric, rescaled to the prompt's range. A module lists such
inputs, after ``pixel_values``, in ``extra_inputs()`` (core's :meth:`mobius.model.Model.extra_inputs`:
name -> (dtype, shape), dtype None for the build's float type).

Outputs, named after transformers' ``DepthEstimatorOutput`` fields, as the module
declares them in ``output_shapes()``:

- ``predicted_depth`` [batch, depth_height, depth_width]: the raw depth (relative
  inverse depth, or metric depth in the family's unit), at the model's own output
  resolution; a runner resizes it to the image's size;
- any extra field a family returns, by its transformers name: Depth Pro's
  ``field_of_view`` [batch], the horizontal field of view in degrees, where the checkpoint
  has its FOV head (``use_fov_model``); its ``predicted_depth`` is then an inverse depth that
  ``post_process_depth_estimation`` makes metric with the focal length the angle gives.
  ZoeDepth's two-domain ("NK") form returns ``domain_logits`` [batch, 2], the scores of its
  bin configurations (the batch's summed scores pick the one its depth comes from).

Depth Pro's graph takes one image size (``patch_size`` over the smallest of
``scaled_images_ratios``: 1536 x 1536 for ``apple/DepthPro-hf``), the size its image
processor makes.

The module takes ``pixel_values`` and returns a dict of its outputs.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks import IR_VERSION, ModelTask, set_output


class DepthEstimationTask(ModelTask):
    """One graph: ``pixel_values`` -> ``predicted_depth`` (and a family's extra outputs)."""

    name = "depth-estimation"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        graph, builder = self.new_graph("depth_estimation")
        height, width = module.fixed_image_size or ("height", "width")
        pixel_values = builder.input(
            "pixel_values", dtype, ["batch", config.num_channels, height, width]
        )
        extra = [
            builder.input(name, input_dtype or dtype, shape)
            for name, (input_dtype, shape) in module.extra_inputs().items()
        ]
        outputs = module(builder.op, pixel_values, *extra)
        shapes = module.output_shapes()
        for name, value in outputs.items():
            set_output(builder, value, name, dtype, shapes[name])
        return {"model": ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")}
