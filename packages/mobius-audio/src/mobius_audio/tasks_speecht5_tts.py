"""The ``text-to-speech`` contract (SpeechT5) and the ``spectrogram-vocoder`` contract (its HiFi-GAN).

Registered with core's registry by :mod:`mobius_audio.plugin`; run by
:mod:`mobius_audio.speecht5_tts`. SpeechT5 speaks in two checkpoints: the
text-to-spectrogram model (``microsoft/speecht5_tts``) and the vocoder
(``microsoft/speecht5_hifigan``), each built on its own; the runner looks for the
vocoder's package in the speech package's ``vocoder/`` folder (build it there:
``mobius build --model microsoft/speecht5_hifigan tts-out/vocoder``) or takes
``--vocoder DIR``. The waveform is at the vocoder's ``sampling_rate`` (16 kHz).

``text-to-speech`` (``SpeechT5ForTextToSpeech``), three graphs, float32:

``encoder/model.onnx``
    The encoder of core's ``seq2seq`` contract: inputs ``input_ids`` int64 [batch,
    text] (the package's SpeechT5 tokenizer, ``</s>`` last; padded with
    ``pad_token_id``) and ``attention_mask`` int64 [batch, text]; outputs
    ``last_hidden_state`` [batch, text, hidden] and each decoder layer's
    cross-attention cache ``present.{i}.encoder.key`` / ``.value`` [batch, heads,
    text, head_dim].

``decoder/model.onnx``
    One step (or several) of the speech decoder. Inputs:
    ``decoder_input_values`` float [batch, decoder_sequence, num_mel_bins] (the
    last mel frame so far: zeros at the first step), ``speaker_embeddings`` float
    [batch, speaker_embedding_dim] (an x-vector; the graph L2-normalises it),
    ``prenet_dropout_mask`` float [speech_decoder_prenet_layers,
    decoder_sequence, speech_decoder_prenet_units] (0/1, shared by the batch: 1
    with probability ``speech_decoder_prenet_dropout``, as transformers' always-on
    prenet dropout draws it; kept units are divided by ``1 - p``),
    ``encoder_attention_mask`` int64 [batch, text], ``past_key_values.{i}.decoder.key``
    / ``.value`` [batch, heads, past_decoder_sequence, head_dim] (empty at the
    first step) and ``past_key_values.{i}.encoder.key`` / ``.value`` (the
    encoder's presents). Outputs: ``spectrum`` float [batch, decoder_sequence *
    reduction_factor, num_mel_bins] (the new frames, before the postnet),
    ``stop_probabilities`` float [batch, decoder_sequence, reduction_factor]
    (sigmoids: a row stops when their sum reaches the threshold, 0.5 by default)
    and ``present.{i}.decoder.key`` / ``.value``.

``postnet/model.onnx``
    ``raw_spectrogram`` float [batch, frames, num_mel_bins] (every step's
    ``spectrum``, concatenated) -> ``spectrogram`` [batch, frames, num_mel_bins]
    (the log-mel spectrogram transformers' ``generate_speech`` returns).

``spectrogram-vocoder`` (``SpeechT5HifiGan``), one graph ``model.onnx``:
``spectrogram`` float [batch, frames, model_in_dim] -> ``waveform`` float [batch,
samples] in [-1, 1], ``samples = frames * prod(upsample_rates)`` (256 at 16 kHz:
one frame per 16 ms).

Module hooks: text-to-speech ``encode(op, input_ids, attention_mask) -> (hidden,
[(k, v)])``, ``decode(op, frames, speaker, dropout_mask, encoder_mask,
self_cache, cross_cache) -> (spectrum, stop, presents)``, ``postnet(op,
raw_spectrogram)``, ``cache_shapes()`` and the config's ``num_mel_bins``,
``reduction_factor``, ``speaker_embedding_dim`` and prenet sizes; the vocoder
``vocode(op, spectrogram)``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.errors import ConfigError
from mobius.tasks import IR_VERSION, ModelTask, set_output, twin_module

INT64 = ir.DataType.INT64


def _float32_only(task: str, dtype: ir.DataType) -> None:
    if dtype != ir.DataType.FLOAT:  # the parity and stop thresholds are measured in float32
        raise ConfigError(f"{task} graphs are built in float32, not {dtype.name}")


def _cache_inputs(builder, layers: int, kind: str, shape: list, dtype) -> list[tuple]:
    return [
        tuple(
            builder.input(f"past_key_values.{i}.{kind}.{part}", dtype, shape)
            for part in ("key", "value")
        )
        for i in range(layers)
    ]


class TextToSpeechTask(ModelTask):
    """``encoder/model``, ``decoder/model`` and ``postnet/model``; see the module docstring."""

    name = "text-to-speech"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        _float32_only(self.name, dtype)
        layers, heads, head_dim = module.cache_shapes()
        cross_shape = ["batch", heads, "text", head_dim]
        mel = config.num_mel_bins

        graph, builder = self.new_graph("encoder")
        input_ids = builder.input("input_ids", INT64, ["batch", "text"])
        attention_mask = builder.input("attention_mask", INT64, ["batch", "text"])
        hidden, cross = module.encode(builder.op, input_ids, attention_mask)
        set_output(
            builder, hidden, "last_hidden_state", dtype, ["batch", "text", config.hidden_size]
        )
        for i, (key, value) in enumerate(cross):
            set_output(builder, key, f"present.{i}.encoder.key", dtype, cross_shape)
            set_output(builder, value, f"present.{i}.encoder.value", dtype, cross_shape)
        encoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")

        graph, builder = self.new_graph("decoder")
        frames = builder.input("decoder_input_values", dtype, ["batch", "decoder_sequence", mel])
        speaker = builder.input(
            "speaker_embeddings", dtype, ["batch", config.speaker_embedding_dim]
        )
        mask_shape = [
            config.speech_decoder_prenet_layers,
            "decoder_sequence",
            config.speech_decoder_prenet_units,
        ]
        dropout_mask = builder.input("prenet_dropout_mask", dtype, mask_shape)
        encoder_mask = builder.input("encoder_attention_mask", INT64, ["batch", "text"])
        past = ["batch", heads, "past_decoder_sequence", head_dim]
        self_cache = _cache_inputs(builder, layers, "decoder", past, dtype)
        cross_cache = _cache_inputs(builder, layers, "encoder", cross_shape, dtype)
        spectrum, stop, presents = twin_module(module).decode(
            builder.op, frames, speaker, dropout_mask, encoder_mask, self_cache, cross_cache
        )
        set_output(builder, spectrum, "spectrum", dtype, ["batch", "spectrum_frames", mel])
        stop_shape = ["batch", "decoder_sequence", config.reduction_factor]
        set_output(builder, stop, "stop_probabilities", dtype, stop_shape)
        total = ["batch", heads, "total_decoder_sequence", head_dim]
        for i, (key, value) in enumerate(presents):
            set_output(builder, key, f"present.{i}.decoder.key", dtype, total)
            set_output(builder, value, f"present.{i}.decoder.value", dtype, total)
        decoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")

        graph, builder = self.new_graph("postnet")
        raw = builder.input("raw_spectrogram", dtype, ["batch", "frames", mel])
        spectrogram = twin_module(module).postnet(builder.op, raw)
        set_output(builder, spectrogram, "spectrogram", dtype, ["batch", "frames", mel])
        postnet = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")
        return {"encoder/model": encoder, "decoder/model": decoder, "postnet/model": postnet}


class SpectrogramVocoderTask(ModelTask):
    """One graph, ``model``: ``spectrogram`` -> ``waveform``; see the module docstring."""

    name = "spectrogram-vocoder"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        _float32_only(self.name, dtype)
        graph, builder = self.new_graph("vocoder")
        shape = ["batch", "frames", config.model_in_dim]
        waveform = module.vocode(builder.op, builder.input("spectrogram", dtype, shape))
        set_output(builder, waveform, "waveform", dtype, ["batch", "samples"])
        return {"model": ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")}
