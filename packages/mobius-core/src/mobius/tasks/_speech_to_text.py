"""The speech-to-text contract: Seq2SeqTask's two graphs, with log-mel features for a source.

``encoder/model.onnx``
    input ``input_features`` float [batch, num_mel_bins, frames] (the build dtype:
    the model's own feature extractor's log-mel spectrogram, e.g. Whisper's 80 or
    128 bins over 3000 frames of 30 s); outputs ``last_hidden_state`` [batch,
    encoder_sequence, hidden] and, per decoder layer, the cross-attention cache
    ``present.{i}.encoder.key`` / ``.value`` [batch, heads, encoder_sequence,
    head_dim], projected once. ``encoder_sequence`` is what the front end makes of
    ``frames`` (Whisper's stride-2 convolution halves it). There is no attention
    mask: Whisper attends over the whole padded window, as transformers does.

``decoder/model.onnx``
    inputs ``input_ids`` int64 [batch, decoder_sequence] and per layer
    ``past_key_values.{i}.decoder.key`` / ``.value`` [batch, heads,
    past_decoder_sequence, head_dim] (empty at the first step) and the encoder's
    ``past_key_values.{i}.encoder.key`` / ``.value``; outputs ``logits`` [batch,
    decoder_sequence, vocab] and ``present.{i}.decoder.key`` / ``.value``. The
    same as :class:`~mobius.tasks._seq2seq.Seq2SeqTask`'s decoder without
    ``encoder_attention_mask``: every encoder position is real.

The prompt tokens (``<|startoftranscript|>``, language, task, ``<|notimestamps|>``),
timestamps and suppressed tokens are the generation loop's business, as in
transformers. The module provides ``encode(op, input_features) -> (hidden,
[(k, v)])``, ``decode(op, input_ids, self_cache, cross_cache) -> (logits,
[(k, v)])``, ``cache_shapes()`` and a config with ``num_mel_bins``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks._seq2seq import Seq2SeqTask


class SpeechToTextTask(Seq2SeqTask):
    """Encoder over log-mel features and a cached decoder; see the module docstring."""

    name = "speech-to-text"

    def encoder_inputs(self, builder, config, dtype: ir.DataType) -> list[ir.Value]:
        shape = ["batch", config.num_mel_bins, "frames"]
        return [builder.input("input_features", dtype, shape)]

    def decoder_source_inputs(self, builder) -> list[ir.Value]:
        return []  # no encoder padding: the cross cache is all the decoder reads
