"""The cross-attention vision–language contract (Mllama): the image's cache made once.

Where a decoder cross-attends to the image instead of reading image features in its
embeddings, the vision states are a source, as an encoder–decoder's are. Two graphs:

``vision/model.onnx``
    the family's vision inputs (Mllama: the processor's ``pixel_values`` float
    [batch, num_images, max_num_tiles, channels, tile, tile], ``aspect_ratio_ids``
    int64 [batch, num_images], ``aspect_ratio_mask`` int64 [batch, num_images,
    max_num_tiles]) -> per cross-attention layer ``i`` (its index among all decoder
    layers) ``present.{i}.cross.key`` / ``.value`` [batch, kv_heads, vision_tokens,
    head_dim]: the projected, normed keys and values. They depend on the images
    alone, so generation computes them once.

``decoder/model.onnx``
    ``input_ids`` int64 [batch, sequence], ``attention_mask`` int64 [batch,
    total_sequence], ``position_ids`` int64 [batch, sequence], the family's
    ``decoder_inputs()`` (Mllama: ``cross_attention_mask`` int64 [batch, sequence,
    num_images, max_num_tiles], the processor's rows for the tokens fed; a decode
    step repeats the last row, as transformers' ``generate`` does), per
    self-attention layer ``i`` ``past_key_values.{i}.key`` / ``.value`` [batch,
    kv_heads, past_sequence, head_dim], and per cross-attention layer the vision
    graph's ``past_key_values.{i}.cross.key`` / ``.value`` -> ``logits`` [batch,
    sequence, vocab] and ``present.{i}.key`` / ``.value`` [batch, kv_heads,
    total_sequence, head_dim] for the self-attention layers.

Layer indices are the decoder's own (transformers' cache layer indices), so the
self-attention names skip the cross-attention layers. Only the split form exists:
the cross-attention inputs have no image-free value to pass on decode steps.

The module gives ``vision_inputs(dtype)``, ``decoder_inputs()``, ``cache_shape() ->
(kv_heads, head_dim)``, ``self_attention_layers()``, ``cross_attention_layers()``,
``cross_cache(op, *vision_inputs) -> {i: (key, value)}`` and ``decode(op, input_ids,
attention_mask, position_ids, past, *extras, cross) -> (logits, {i: (key, value)})``.
"""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from mobius.errors import ConfigError
from mobius.tasks import IR_VERSION, ModelTask, set_output, twin_module
from mobius_vision.processing._settings import keep_processor_config
from mobius_vision.tasks.vision_language import apply_form

INT64 = ir.DataType.INT64


def _model(graph: ir.Graph) -> ir.Model:
    model = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")
    RemoveUnusedNodesPass()(model)  # each graph reads only its part of the weights
    return model


class CrossAttentionVisionLanguageTask(ModelTask):
    """Vision graph making the cross-attention cache, decoder reading it (module docstring)."""

    name = "cross-attention-vision-language"

    def configure(self, config, options, source):
        """The config with the form the build asks (only ``split`` builds); encoder options
        refused; the source's HF processor settings kept (as :class:`VisionLanguageTask` does)."""
        keep_processor_config(source)
        return apply_form(super().configure(config, options, source), options)

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        if getattr(config, "form", "split") != "split":
            raise ConfigError(f"{config.model_type} builds the split form only (--form split)")
        return {  # each graph from its own tree
            "vision/model": self._vision(module, dtype),
            "decoder/model": self._decoder(twin_module(module), dtype),
        }

    def _vision(self, module, dtype) -> ir.Model:
        graph, builder = self.new_graph("vision")
        inputs = [builder.input(n, t, shape) for n, t, shape in module.vision_inputs(dtype)]
        heads, head_dim = module.cache_shape()
        shape = ["batch", heads, "vision_tokens", head_dim]
        cross = module.cross_cache(builder.op, *inputs)
        for i in module.cross_attention_layers():
            for kind, value in zip(("key", "value"), cross[i], strict=True):
                set_output(builder, value, f"present.{i}.cross.{kind}", dtype, shape)
        return _model(graph)

    def _decoder(self, module, dtype) -> ir.Model:
        graph, builder = self.new_graph("decoder")
        input_ids = builder.input("input_ids", INT64, ["batch", "sequence"])
        attention_mask = builder.input("attention_mask", INT64, ["batch", "total_sequence"])
        position_ids = builder.input("position_ids", INT64, ["batch", "sequence"])
        extras = [builder.input(n, t, shape) for n, t, shape in module.decoder_inputs()]
        heads, head_dim = module.cache_shape()

        def pair(prefix, length):
            shape = ["batch", heads, length, head_dim]
            return tuple(builder.input(f"{prefix}.{k}", dtype, shape) for k in ("key", "value"))

        past = {
            i: pair(f"past_key_values.{i}", "past_sequence") for i in module.self_attention_layers()
        }
        cross = {
            i: pair(f"past_key_values.{i}.cross", "vision_tokens")
            for i in module.cross_attention_layers()
        }
        logits, present = module.decode(
            builder.op, input_ids, attention_mask, position_ids, past, *extras, cross
        )
        set_output(
            builder, logits, "logits", dtype, ["batch", "sequence", module.config.vocab_size]
        )
        total = ["batch", heads, "total_sequence", head_dim]
        for i in module.self_attention_layers():
            for kind, value in zip(("key", "value"), present[i], strict=True):
                set_output(builder, value, f"present.{i}.{kind}", dtype, total)
        return _model(graph)
