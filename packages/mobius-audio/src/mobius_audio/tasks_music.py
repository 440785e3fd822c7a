"""The ``text-to-music`` contract: a text encoder, a decoder over codec codebooks, a codec decoder.

Registered with core's registry by :mod:`mobius_audio.plugin`; built for MusicGen
(:mod:`mobius_audio.models.musicgen`) and, in its prefix form below, MusicGen-Melody
(:mod:`mobius_audio.models.musicgen_melody`); run by :mod:`mobius_audio.music`. Three
graphs, float32:

``text_encoder/model.onnx``
    inputs ``input_ids``, ``attention_mask`` int64 [batch, text] (the package's
    tokenizer, padded; 1 real, 0 padding). Outputs ``last_hidden_state`` float
    [batch, text, hidden] (the text states as the decoder reads them: projected to
    its width, padded tokens zeroed) and, per decoder layer, the cross-attention
    cache ``present.{i}.encoder.key`` / ``.value`` float [batch, heads, text,
    head_dim], projected once here, not at every step.

``decoder/model.onnx``
    inputs ``input_ids`` int64 [batch, codebooks, sequence] (one code per codebook
    and step; the pad id, ``vocab_size``, where the delay pattern holds no code),
    ``encoder_attention_mask`` int64 [batch, text], and per layer the
    self-attention cache ``past_key_values.{i}.decoder.key`` / ``.value`` float
    [batch, heads, past_sequence, head_dim] (empty at the first step) and the text
    encoder's ``past_key_values.{i}.encoder.key`` / ``.value``. Outputs ``logits``
    float [batch, codebooks, sequence, vocab] and ``present.{i}.decoder.key`` /
    ``.value`` [batch, heads, past_sequence + sequence, head_dim]. Positions count
    on from the cache's length; decoder steps have no padding (every row starts at
    the decoder start id and advances together).

``audio_decoder/model.onnx``
    input ``audio_codes`` int64 [batch, codebooks, frames] (the generated codes,
    the delay pattern undone); output ``audio_values`` float [batch,
    audio_channels, samples] at the codec's ``sampling_rate`` (``config.json``'s
    ``audio_encoder.sampling_rate``; EnCodec 32 kHz for MusicGen, ``frames *
    hop_length`` samples). Stereo models interleave the channels' codebooks (left
    0, 2, ...; right 1, 3, ...).

Classifier-free guidance runs the decoder on a doubled batch: the second half
reads all-zero text states, which is an all-zero cross-attention cache (MusicGen's
cross-attention projections have no bias) with an all-zero
``encoder_attention_mask``; a fully masked row attends evenly to zero values, so
its cross-attention adds nothing, as in transformers.

The prefix form (task ``text-to-music-prefix``, MusicGen-Melody) has no
cross-attention: ``text_encoder/model.onnx`` also takes ``input_features`` float
[batch, chroma_frames, num_chroma] (a chroma per frame; a text-only prompt gives
the "null" chroma, one frame of pitch class 0) and returns ``conditioning`` float
[batch, prefix, hidden] (the chroma projected, tiled to ``chroma_length`` frames
and cut, then the projected text states with padded tokens zeroed);
``decoder/model.onnx`` takes ``input_ids``, ``conditioning`` (the whole prefix at
the first step, prepended to the codes; then ``[batch, 0, hidden]``, the cache
holding it) and the self-attention cache, and returns ``logits`` for the codes'
positions only. Nothing is masked: as in transformers' generate, padded text rows
are zero states that stay in the prefix. The guidance batch's empty prompt is the
null chroma with the text's mask all zero. Its module provides
``encode_conditioning(op, input_ids, attention_mask, input_features)`` and
``decode(op, input_ids, conditioning, self_cache)`` instead, and a config with
``num_chroma``.

The module provides ``encode_text(op, input_ids, attention_mask) -> (states,
[(key, value)])``, ``decode(op, input_ids, encoder_attention_mask, self_cache,
cross_cache) -> (logits, [(key, value)])``, ``decode_audio(op, audio_codes) ->
audio_values``, ``cache_shapes() -> (layers, heads, head_dim)`` and a config with
``hidden_size``, ``num_codebooks``, ``vocab_size`` and ``audio_channels``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.errors import ConfigError
from mobius.tasks import IR_VERSION, ModelTask, set_output, twin_module

INT64 = ir.DataType.INT64
GRAPHS = ("text_encoder", "decoder", "audio_decoder")
KINDS = ("key", "value")


def _model(graph: ir.Graph) -> ir.Model:
    return ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")


def _self_cache(builder, layers: int, shape: list, dtype) -> list[tuple]:
    """The decoder's ``past_key_values.{i}.decoder.key`` / ``.value`` inputs."""
    return [
        tuple(builder.input(f"past_key_values.{i}.decoder.{k}", dtype, shape) for k in KINDS)
        for i in range(layers)
    ]


class TextToMusicTask(ModelTask):
    """Three graphs, ``text_encoder/``, ``decoder/`` and ``audio_decoder/``; see the module docstring.

    The text reaches the decoder through cross-attention (MusicGen); the prefix form
    (:class:`TextToMusicPrefixTask`) overrides the first two graphs.
    """

    name = "text-to-music"

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        if dtype != ir.DataType.FLOAT:  # the masks and the codec are written in float32
            raise ConfigError(f"text-to-music graphs are built in float32, not {dtype.name}")
        # A parameter belongs to the first graph that uses it: each graph gets its own tree.
        return {
            "text_encoder/model": self.text_encoder(module, config, dtype),
            "decoder/model": self.decoder(twin_module(module), config, dtype),
            "audio_decoder/model": self.audio_decoder(twin_module(module), config, dtype),
        }

    def text_encoder(self, module, config, dtype) -> ir.Model:
        _, heads, head_dim = module.cache_shapes()
        cross = ["batch", heads, "text", head_dim]
        graph, builder = self.new_graph("text_encoder")
        input_ids = builder.input("input_ids", INT64, ["batch", "text"])
        attention_mask = builder.input("attention_mask", INT64, ["batch", "text"])
        states, cross_cache = module.encode_text(builder.op, input_ids, attention_mask)
        shape = ["batch", "text", config.hidden_size]
        set_output(builder, states, "last_hidden_state", dtype, shape)
        for i, (key, value) in enumerate(cross_cache):
            set_output(builder, key, f"present.{i}.encoder.key", dtype, cross)
            set_output(builder, value, f"present.{i}.encoder.value", dtype, cross)
        return _model(graph)

    def decoder_source(self, module, builder, dtype) -> list:
        """The decoder's inputs of the text, after the codes and before the self cache."""
        layers, heads, head_dim = module.cache_shapes()
        cross = ["batch", heads, "text", head_dim]
        mask = builder.input("encoder_attention_mask", INT64, ["batch", "text"])
        cross_cache = [
            tuple(builder.input(f"past_key_values.{i}.encoder.{k}", dtype, cross) for k in KINDS)
            for i in range(layers)
        ]
        return [mask, cross_cache]

    def decode(self, module, op, codes, source, self_cache):
        mask, cross_cache = source
        return module.decode(op, codes, mask, self_cache, cross_cache)

    def decoder(self, module, config, dtype) -> ir.Model:
        layers, heads, head_dim = module.cache_shapes()
        graph, builder = self.new_graph("decoder")
        codes = builder.input("input_ids", INT64, ["batch", config.num_codebooks, "sequence"])
        source = self.decoder_source(module, builder, dtype)
        self_cache = _self_cache(
            builder, layers, ["batch", heads, "past_sequence", head_dim], dtype
        )
        logits, presents = self.decode(module, builder.op, codes, source, self_cache)
        shape = ["batch", config.num_codebooks, "sequence", config.vocab_size]
        set_output(builder, logits, "logits", dtype, shape)
        total = ["batch", heads, "total_sequence", head_dim]
        for i, (key, value) in enumerate(presents):
            set_output(builder, key, f"present.{i}.decoder.key", dtype, total)
            set_output(builder, value, f"present.{i}.decoder.value", dtype, total)
        return _model(graph)

    def audio_decoder(self, module, config, dtype) -> ir.Model:
        graph, builder = self.new_graph("audio_decoder")
        codes = builder.input("audio_codes", INT64, ["batch", config.num_codebooks, "frames"])
        audio = module.decode_audio(builder.op, codes)
        shape = ["batch", config.audio_channels, "samples"]
        set_output(builder, audio, "audio_values", dtype, shape)
        return _model(graph)


class TextToMusicPrefixTask(TextToMusicTask):
    """The prefix form (MusicGen-Melody): the conditioning is prepended to the decoder's input."""

    name = "text-to-music-prefix"

    def text_encoder(self, module, config, dtype) -> ir.Model:
        graph, builder = self.new_graph("text_encoder")
        input_ids = builder.input("input_ids", INT64, ["batch", "text"])
        attention_mask = builder.input("attention_mask", INT64, ["batch", "text"])
        chroma = ["batch", "chroma_frames", config.num_chroma]
        input_features = builder.input("input_features", dtype, chroma)
        conditioning = module.encode_conditioning(
            builder.op, input_ids, attention_mask, input_features
        )
        shape = ["batch", "prefix", config.hidden_size]
        set_output(builder, conditioning, "conditioning", dtype, shape)
        return _model(graph)

    def decoder_source(self, module, builder, dtype) -> list:
        shape = ["batch", "prefix", module.config.hidden_size]
        return [builder.input("conditioning", dtype, shape)]

    def decode(self, module, op, codes, source, self_cache):
        (conditioning,) = source
        return module.decode(op, codes, conditioning, self_cache)
