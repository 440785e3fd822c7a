"""The ``audio-codec`` task: a neural audio codec (DAC; EnCodec to come) as two graphs.

Registered with core's registry by :mod:`mobius_audio.plugin`.

``encoder/model.onnx``
    input ``input_values`` float [batch, channels, samples]: the waveform at the
    model's ``sampling_rate``, as its feature extractor pads it (zeros on the
    right to a multiple of the hop length; DAC is mono: ``channels`` is 1).
    Output ``audio_codes`` int64 [batch, num_quantizers, frames]: the index of the
    chosen codebook row per residual-quantizer stage and frame
    (``frames = samples / hop_length``).

``decoder/model.onnx``
    input ``audio_codes`` int64 [batch, num_codebooks, frames]; output
    ``audio_values`` float [batch, channels, samples].

Bandwidth: the encoder always quantizes with every stage. Residual quantization
is sequential, so the first ``K`` stages of its codes are exactly the codes a
``K``-stage (lower bandwidth) encoding gives; the decoder takes any
``1 <= K <= num_quantizers`` leading stages and sums only those. A runner picks
``K`` (``mobius codec --codebooks``) by slicing the codes.

The module provides ``encode(op, input_values) -> audio_codes``,
``decode(op, audio_codes) -> audio_values`` and a config with ``channels``,
``n_codebooks`` (the number of stages) and ``hop_length``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks import IR_VERSION, ModelTask, set_output, twin_module

INT64 = ir.DataType.INT64


class AudioCodecTask(ModelTask):
    """Encoder (waveform to codes) and decoder (codes to waveform); see the module docstring."""

    name = "audio-codec"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        channels = config.channels
        graph, builder = self.new_graph("encoder")
        waveform = builder.input("input_values", dtype, ["batch", channels, "samples"])
        codes = module.encode(builder.op, waveform)
        shape = ["batch", config.n_codebooks, "frames"]
        set_output(builder, codes, "audio_codes", INT64, shape)
        encoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")

        # A parameter belongs to the first graph that uses it: the decoder gets its own tree.
        decoder_module = twin_module(module)
        graph, builder = self.new_graph("decoder")
        codes = builder.input("audio_codes", INT64, ["batch", "num_codebooks", "frames"])
        audio = decoder_module.decode(builder.op, codes)
        set_output(builder, audio, "audio_values", dtype, ["batch", channels, "audio_samples"])
        decoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")
        return {"encoder/model": encoder, "decoder/model": decoder}
