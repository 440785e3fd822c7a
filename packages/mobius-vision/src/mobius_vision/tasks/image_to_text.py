"""The image-to-text contract: an encoder–decoder whose source is an image (TrOCR, Donut...).

Core's seq2seq contract (:class:`mobius.tasks.Seq2SeqTask`), two graphs, with
pixels for a source, as mobius-audio's speech-to-text task has audio:

``encoder/model.onnx``
    input ``pixel_values`` [batch, channels, height, width] in the build dtype,
    as the family's image processor makes it; outputs ``last_hidden_state``
    [batch, encoder_sequence, encoder_hidden] (the vision encoder's states, before
    any projection to the decoder's width) and, per decoder layer, the
    cross-attention cache ``present.{i}.encoder.key`` / ``.value`` [batch, heads,
    encoder_sequence, head_dim], projected once.

``decoder/model.onnx``
    inputs ``input_ids`` int64 [batch, decoder_sequence] and per layer
    ``past_key_values.{i}.decoder.key`` / ``.value`` [batch, heads,
    past_decoder_sequence, head_dim] (empty at the first step) and the encoder's
    ``past_key_values.{i}.encoder.key`` / ``.value``; outputs ``logits`` [batch,
    decoder_sequence, vocab] and ``present.{i}.decoder.key`` / ``.value``. Every
    patch of an image is real, so there is no encoder mask (transformers' vision
    encoder–decoder passes none either).

The module provides ``encode(op, pixel_values) -> (hidden, [(k, v)])``,
``decode(op, input_ids, self_cache, cross_cache) -> (logits, [(k, v)])``,
``cache_shapes()`` and a config with ``hidden_size`` (the encoder's),
``vocab_size``, ``num_channels`` and ``image_size`` (height, width).

**Variable-resolution patches** (Pix2Struct): a module with ``patch_input() -> (name,
shape)`` takes the processor's patches instead of pixels, padded to a fixed count:
the encoder's inputs are that (``flattened_patches`` float [batch, patches,
2 + patch_values]: row and column index, then the values) and ``attention_mask``
int64 [batch, patches] (1 real, 0 padding); the decoder then also takes
``encoder_attention_mask`` (the same mask), exactly core's seq2seq decoder. Its
``encode`` takes ``(op, patches, attention_mask)`` and its ``decode`` ``(op,
input_ids, encoder_attention_mask, self_cache, cross_cache)``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks import Seq2SeqTask

INT64 = ir.DataType.INT64


def takes_patches(module) -> bool:
    """Whether ``module`` reads padded patch lists (and so masks padding) instead of pixels."""
    return hasattr(module, "patch_input")


class ImageToTextTask(Seq2SeqTask):
    """Encoder over pixels (or patches) and a cached decoder; see the module docstring."""

    name = "image-to-text"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        self._module = module  # the hooks below read what it declares
        return super().build(module, config, dtype)

    def encoder_inputs(self, builder, config, dtype: ir.DataType) -> list[ir.Value]:
        """``pixel_values``; or the patches and their mask."""
        if takes_patches(self._module):
            name, shape = self._module.patch_input()
            patches = builder.input(name, dtype, shape)
            return [patches, builder.input("attention_mask", INT64, shape[:2])]
        height, width = config.image_size
        shape = ["batch", config.num_channels, height, width]
        return [builder.input("pixel_values", dtype, shape)]

    def decoder_source_inputs(self, builder) -> list[ir.Value]:
        if takes_patches(self._module):
            return super().decoder_source_inputs(builder)  # encoder_attention_mask
        return []  # every patch is real: the cross cache is all the decoder reads
