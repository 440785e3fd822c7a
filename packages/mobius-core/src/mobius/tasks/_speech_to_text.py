"""The speech-to-text contract: Seq2SeqTask's two graphs, with audio for a source.

``encoder/model.onnx``
    input: the source, as the model's feature extractor makes it, in the build
    dtype. Whisper: ``input_features`` [batch, num_mel_bins, frames] (the log-mel
    spectrogram, e.g. 80 or 128 bins over 3000 frames of 30 s). A module may name
    another (``speech_input``): Speech2Text's ``input_features`` [batch, frames,
    feature_size] (fbank), Moonshine's ``input_values`` [batch, samples] (the raw
    waveform). Outputs ``last_hidden_state`` [batch, encoder_sequence, hidden]
    and, per decoder layer, the cross-attention cache ``present.{i}.encoder.key``
    / ``.value`` [batch, heads, encoder_sequence, head_dim], projected once.
    ``encoder_sequence`` is what the front end makes of the source (Whisper's
    stride-2 convolution halves the frames).

    Whisper has no attention mask: it attends over the whole padded window, as
    transformers does. A model that masks padding (Speech2Text, Moonshine) also
    takes ``attention_mask`` int64 [batch, frames or samples] (1 real, 0 padding,
    as its extractor returns it) and outputs ``encoder_attention_mask`` int64
    [batch, encoder_sequence]: the mask reduced through the front end's
    subsampling, as transformers reduces it.

``decoder/model.onnx``
    inputs ``input_ids`` int64 [batch, decoder_sequence] and per layer
    ``past_key_values.{i}.decoder.key`` / ``.value`` [batch, heads,
    past_decoder_sequence, head_dim] (empty at the first step) and the encoder's
    ``past_key_values.{i}.encoder.key`` / ``.value``; outputs ``logits`` [batch,
    decoder_sequence, vocab] and ``present.{i}.decoder.key`` / ``.value``. A model
    that masks padding also takes the encoder's ``encoder_attention_mask``, exactly
    :class:`~mobius.tasks._seq2seq.Seq2SeqTask`'s decoder; Whisper's decoder has no
    such input (every encoder position is real).

The prompt tokens (``<|startoftranscript|>``, language, task, ``<|notimestamps|>``),
timestamps and suppressed tokens are the generation loop's business, as in
transformers. The module provides ``encode(op, source) -> (hidden, [(k, v)])``,
``decode(op, input_ids, self_cache, cross_cache) -> (logits, [(k, v)])``,
``cache_shapes()`` and a config with ``num_mel_bins``. A model that masks padding
also provides ``speech_input() -> (name, shape)`` and
``encoder_attention_mask(op, source, attention_mask) -> [batch, encoder_sequence]``;
its ``encode`` then takes ``(op, source, encoder_attention_mask)`` and its
``decode`` ``(op, input_ids, encoder_attention_mask, self_cache, cross_cache)``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks._base import set_output
from mobius.tasks._seq2seq import INT64, Seq2SeqTask

MASK_OUTPUT = "encoder_attention_mask"


def masks_padding(module) -> bool:
    """Whether ``module``'s graphs take a source mask (it reduces one: ``encoder_attention_mask``)."""
    return hasattr(module, "encoder_attention_mask")


class SpeechToTextTask(Seq2SeqTask):
    """Encoder over audio and a cached decoder; see the module docstring."""

    name = "speech-to-text"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        self._module = module  # the hooks below read what it declares
        models = super().build(module, config, dtype)
        outputs = models["encoder/model"].graph.outputs
        masks = [o for o in outputs if o.name == MASK_OUTPUT]
        for mask in masks:  # made with the inputs; listed after last_hidden_state
            outputs.remove(mask)
            outputs.insert(1, mask)
        return models

    def encoder_inputs(self, builder, config, dtype: ir.DataType) -> list[ir.Value]:
        """The source, and for a masked model the reduced mask (also an output), for ``encode``."""
        module = self._module
        if not masks_padding(module):
            shape = ["batch", config.num_mel_bins, "frames"]
            return [builder.input("input_features", dtype, shape)]
        name, shape = module.speech_input()
        source = builder.input(name, dtype, shape)
        attention_mask = builder.input("attention_mask", INT64, shape[:2])
        reduced = module.encoder_attention_mask(builder.op, source, attention_mask)
        set_output(builder, reduced, MASK_OUTPUT, INT64, ["batch", "encoder_sequence"])
        return [source, reduced]

    def decoder_source_inputs(self, builder) -> list[ir.Value]:
        if masks_padding(self._module):
            return super().decoder_source_inputs(builder)  # encoder_attention_mask
        return []  # Whisper: no encoder padding, the cross cache is all the decoder reads
