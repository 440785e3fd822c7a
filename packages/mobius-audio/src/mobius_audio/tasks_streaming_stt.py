"""The ``streaming-speech-to-text`` task: Kyutai STT as two graphs, an audio codec's encoder and an LM.

Registered with core's registry by :mod:`mobius_audio.plugin`.

``audio_encoder/model.onnx``
    input ``input_values`` float [batch, channels, samples]: the waveform at the
    codec's ``sampling_rate`` (24 kHz for Kyutai's Mimi), as the feature extractor
    pads it (silence before, the delay after: :mod:`mobius_audio.kyutai_features`).
    Output ``audio_codes`` int64 [batch, num_codebooks, frames], one frame per
    ``frame_size`` samples (1920: 12.5 frames/s), ``frames = ceil(samples / frame_size)``;
    the codec is causal, so a prefix of the clip gives a prefix of the codes.

``decoder/model.onnx``
    the causal-LM contract (``attention_mask`` int64 [batch, total_sequence],
    ``position_ids`` int64 [batch, sequence], ``past_key_values.{i}.key`` / ``.value``
    float [batch, kv_heads, past_sequence, head_dim] -> ``logits`` [batch, sequence,
    vocab], ``present.{i}.key`` / ``.value``), except that ``input_ids`` is int64
    [batch, sequence, 1 + num_codebooks]: per position the text token, then the audio
    code of each codebook.

Decoding (:mod:`mobius_audio.kyutai_stt`) is transformers' ``generate``: position 0
holds the text start token and ``audio_bos_token_id`` in every codebook; position
``p >= 1`` holds the text token chosen at ``p - 1`` and the codes of frame ``p - 1``;
``samples // frame_size`` tokens are chosen greedily.

The model provides ``encode_audio(op, input_values) -> audio_codes``, ``__call__(op,
input_ids, attention_mask, position_ids, past) -> (logits, present)`` and
``cache_layout()``; its config ``codec.channels``, ``num_codebooks`` and ``vocab_size``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks import IR_VERSION, ModelTask, present_shape, set_output, twin_module
from mobius_audio.tasks_codec import require_float32

INT64 = ir.DataType.INT64


class StreamingSpeechToTextTask(ModelTask):
    """Codec encoder (waveform to codes) and the LM over text and codes; see the module docstring."""

    name = "streaming-speech-to-text"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        require_float32(dtype, "streaming-speech-to-text (Mimi)")
        graph, builder = self.new_graph("audio_encoder")
        waveform = builder.input("input_values", dtype, ["batch", config.codec.channels, "samples"])
        codes = module.encode_audio(builder.op, waveform)
        set_output(builder, codes, "audio_codes", INT64, ["batch", config.num_codebooks, "frames"])
        encoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")

        lm = twin_module(module)
        graph, builder = self.new_graph("decoder")
        streams = 1 + config.num_codebooks
        input_ids = builder.input("input_ids", INT64, ["batch", "sequence", streams])
        attention_mask = builder.input("attention_mask", INT64, ["batch", "total_sequence"])
        position_ids = builder.input("position_ids", INT64, ["batch", "sequence"])
        layout = lm.cache_layout()
        past = [
            tuple(
                builder.input(f"past_key_values.{i}.{kind}", dtype, shape) for kind, shape in layer
            )
            for i, layer in enumerate(layout)
        ]
        logits, present = lm(builder.op, input_ids, attention_mask, position_ids, past)
        set_output(builder, logits, "logits", dtype, ["batch", "sequence", config.vocab_size])
        for i, (values, layer) in enumerate(zip(present, layout, strict=True)):
            for value, (kind, shape) in zip(values, layer, strict=True):
                set_output(builder, value, f"present.{i}.{kind}", dtype, present_shape(shape))
        decoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")
        return {"audio_encoder/model": encoder, "decoder/model": decoder}
