"""The ``audio-codec`` task: a neural audio codec (DAC, EnCodec, X-Codec...) as two graphs.

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

Scales and chunks (EnCodec with ``normalize`` or ``chunk_length_s``, e.g.
``facebook/encodec_48khz``; the config's ``audio_scales`` is true): the encoder
has a second output ``audio_scales`` float [batch, chunks] and the decoder a
second input of that name. The clip is encoded in chunks of ``chunk_length``
samples every ``stride`` (transformers' ``chunk_length`` / ``chunk_stride``), and
``input_values`` must be padded as its feature extractor pads a batch:
``(n - 1) * stride + chunk_length`` samples, ``n >= 1``. That gives ``n`` whole
chunks and, when they overlap, a short last chunk of ``chunk_length - stride``
samples (transformers encodes the same chunks). ``audio_codes`` holds the chunks'
frames one chunk after the other (``ceil(chunk_length / hop)`` per whole chunk,
then the short chunk's own, not padded); ``audio_scales`` each chunk's RMS (plus
1e-8) by which it was divided (1 where the model does not normalise; one chunk
when it does not chunk). The decoder multiplies each decoded chunk by its scale
and cross-fades the chunks as transformers' ``decode`` does
(``_linear_overlap_add``); its output is ``(chunks - 1) * stride`` plus the last
chunk's decoded length samples long.

The graphs are float32 only (``--dtype f16`` is refused): a code is the nearest
codebook row, which half precision's rounding would change.

The module provides ``encode(op, input_values) -> audio_codes``,
``decode(op, audio_codes) -> audio_values`` and a config with ``channels``,
``n_codebooks`` (the number of stages) and ``hop_length``; where the config's
``audio_scales`` is true, ``encode`` returns ``(audio_codes, audio_scales)`` and
``decode`` takes ``(audio_codes, audio_scales)``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.errors import ConfigError
from mobius.tasks import IR_VERSION, ModelTask, set_output, twin_module


def require_float32(dtype: ir.DataType, graphs: str) -> None:
    """Refuse a half-precision build of codec graphs: a code is the nearest codebook row,
    which half precision's rounding changes, and the codes are the contract."""
    if dtype != ir.DataType.FLOAT:
        raise ConfigError(f"{graphs} graphs are built in float32 (--dtype f32), not {dtype.name}")


INT64 = ir.DataType.INT64


class AudioCodecTask(ModelTask):
    """Encoder (waveform to codes) and decoder (codes to waveform); see the module docstring."""

    name = "audio-codec"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        require_float32(dtype, "audio-codec")
        channels = config.channels
        graph, builder = self.new_graph("encoder")
        waveform = builder.input("input_values", dtype, ["batch", channels, "samples"])
        scaled = getattr(config, "audio_scales", False)
        codes = module.encode(builder.op, waveform)
        if scaled:
            codes, scales = codes
        shape = ["batch", config.n_codebooks, "frames"]
        set_output(builder, codes, "audio_codes", INT64, shape)
        if scaled:
            set_output(builder, scales, "audio_scales", dtype, ["batch", "chunks"])
        encoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")

        # A parameter belongs to the first graph that uses it: the decoder gets its own tree.
        decoder_module = twin_module(module)
        graph, builder = self.new_graph("decoder")
        codes = builder.input("audio_codes", INT64, ["batch", "num_codebooks", "frames"])
        if scaled:
            scales = builder.input("audio_scales", dtype, ["batch", "chunks"])
            audio = decoder_module.decode(builder.op, codes, scales)
        else:
            audio = decoder_module.decode(builder.op, codes)
        set_output(builder, audio, "audio_values", dtype, ["batch", channels, "audio_samples"])
        decoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")
        return {"encoder/model": encoder, "decoder/model": decoder}
