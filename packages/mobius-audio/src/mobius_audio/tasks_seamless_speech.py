"""The speech-translation contracts: SeamlessM4T's text translation, then its units and their waveform.

Registered with core's registry by :mod:`mobius_audio.plugin`:
``text-to-speech-translation`` (a text source, core's seq2seq graphs) and
``speech-to-speech-translation`` (an audio source, the masked speech-to-text
graphs of :mod:`mobius_audio.tasks`). Five graphs, all at the build dtype
(float32 tested):

``encoder/model.onnx``
    the source's encoder, exactly as the text-to-text (``input_ids``,
    ``attention_mask``) or speech-to-text (``input_features`` [batch, frames, 160],
    ``attention_mask``; also outputs ``encoder_attention_mask``) contract has it.

``decoder/model.onnx``
    that contract's cached text decoder, with one more output:
    ``last_hidden_state`` [batch, decoder_sequence, hidden], the text decoder's
    final states. The unit model reads them for the whole translated sequence
    (decoder start, target language, text, end token): one run of this graph over
    it with an empty self-attention cache.

``t2u_encoder/model.onnx``
    inputs ``inputs_embeds`` [batch, text, hidden] (those states) and
    ``attention_mask`` int64 [batch, text] (1 for tokens that are not
    ``pad_token_id``); outputs ``last_hidden_state`` and per unit-decoder layer
    ``present.{i}.encoder.key`` / ``.value`` [batch, heads, text, head_dim].

``t2u_decoder/model.onnx``
    core's seq2seq decoder over units: ``input_ids`` (unit ids, prompted with
    ``t2u_eos_token_id`` then the language's ``t2u_lang_code_to_id`` unit),
    ``encoder_attention_mask``, the caches; outputs ``logits`` [batch, units,
    t2u_vocab_size] and ``present.{i}.decoder.*``.

``vocoder/model.onnx``
    inputs ``unit_ids`` int64 [batch, units] (the generated units after the
    prompt, the end unit turned into ``t2u_pad_token_id``, the others minus
    ``vocoder_offset``), ``speaker_id`` and ``language_id`` int64 [batch]
    (``vocoder_lang_code_to_id``); outputs ``waveform`` float [batch, samples] in
    [-1, 1] at the config's ``sampling_rate`` (16 kHz) and ``waveform_lengths``
    int64 [batch] (transformers' lengths: cut each row there).

SeamlessM4T v2 (``text-to-speech-translation-v2``, ``speech-to-speech-translation-v2``)
has the same encoder, decoder and vocoder graphs; its unit model is
non-autoregressive, so its two unit graphs differ:

``t2u_encoder/model.onnx`` (v2)
    ``inputs_embeds``, ``attention_mask`` as above; outputs ``last_hidden_state``
    [batch, text, hidden] only (no cross-attention).

``t2u_decoder/model.onnx`` (v2)
    inputs ``encoder_hidden_states`` [batch, text, hidden] (that output),
    ``char_input_ids`` int64 [batch, characters] (each text token's characters'
    ``char_to_id`` ids, one row after the other, padded with ``pad_token_id``) and
    ``char_count_per_id`` int64 [batch, text] (each state's character count: 0 for
    the decoder prompt, the end token and padding); outputs ``logits`` [batch,
    units, t2u_vocab_size] (one frame per unit: their argmax are the units) and
    ``padding_mask`` int64 [batch, units] (0 past a row's end: the vocoder gets
    ``t2u_pad_token_id`` there). The runner computes the characters and counts
    from the generation config's ``id_to_text`` and ``char_to_id``
    (:mod:`mobius_audio.seamless_v2_speech_generate`).

The module provides the seq2seq hooks of its text model (``decode`` adds the
``last_hidden_state`` output), ``text_to_unit()`` (a module with core's seq2seq
hooks over the unit model, its ``config`` that model's) and ``vocode(op,
unit_ids, speaker_id, language_id) -> (waveform, waveform_lengths)``; a v2 module
``t2u_encode(op, inputs_embeds, attention_mask) -> states`` and ``t2u_units(op,
encoder_hidden_states, char_input_ids, char_count_per_id) -> (logits, padding_mask)``
instead of ``text_to_unit()``.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.tasks import IR_VERSION, Seq2SeqTask, set_output, twin_module
from mobius_audio.tasks import SpeechToTextTask

INT64 = ir.DataType.INT64


class TextToUnitTask(Seq2SeqTask):
    """Core's seq2seq graphs with states, not token ids, for the encoder's source."""

    name = "text-to-unit"

    def encoder_inputs(self, builder, config, dtype: ir.DataType) -> list[ir.Value]:
        return [
            builder.input(
                "inputs_embeds", dtype, ["batch", "encoder_sequence", config.hidden_size]
            ),
            builder.input("attention_mask", INT64, ["batch", "encoder_sequence"]),
        ]


class UnitSpeechGraphs:
    """The unit model's and the vocoder's graphs after a text model's (a mixin before its task)."""

    genai = False

    def build(self, module, config, dtype: ir.DataType) -> dict[str, ir.Model]:
        models = super().build(module, config, dtype)
        models.update(self.unit_graphs(module, dtype))
        models["vocoder/model"] = self.vocoder_graph(twin_module(module), dtype)
        return models

    def unit_graphs(self, module, dtype: ir.DataType) -> dict[str, ir.Model]:
        """``t2u_encoder/model`` and ``t2u_decoder/model``: core's seq2seq graphs of the unit model."""
        units = module.text_to_unit()
        graphs = TextToUnitTask(self.ep).build(units, units.config, dtype)
        return {f"t2u_{name}": graph for name, graph in graphs.items()}

    def vocoder_graph(self, module, dtype: ir.DataType) -> ir.Model:
        graph, builder = self.new_graph("vocoder")
        unit_ids = builder.input("unit_ids", INT64, ["batch", "units"])
        speaker_id = builder.input("speaker_id", INT64, ["batch"])
        language_id = builder.input("language_id", INT64, ["batch"])
        waveform, lengths = module.vocode(builder.op, unit_ids, speaker_id, language_id)
        set_output(builder, waveform, "waveform", dtype, ["batch", "samples"])
        set_output(builder, lengths, "waveform_lengths", INT64, ["batch"])
        return ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")


class CharacterUnitGraphs(UnitSpeechGraphs):
    """v2's unit graphs: its encoder alone, then the non-autoregressive decoder (see the module docstring)."""

    def unit_graphs(self, module, dtype: ir.DataType) -> dict[str, ir.Model]:
        graph, builder = self.new_graph("t2u_encoder")
        hidden = module.config.hidden_size
        states = builder.input("inputs_embeds", dtype, ["batch", "encoder_sequence", hidden])
        mask = builder.input("attention_mask", INT64, ["batch", "encoder_sequence"])
        encoded = twin_module(module).t2u_encode(builder.op, states, mask)
        set_output(
            builder, encoded, "last_hidden_state", dtype, ["batch", "encoder_sequence", hidden]
        )
        encoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")

        graph, builder = self.new_graph("t2u_decoder")
        states = builder.input(
            "encoder_hidden_states", dtype, ["batch", "encoder_sequence", hidden]
        )
        chars = builder.input("char_input_ids", INT64, ["batch", "characters"])
        counts = builder.input("char_count_per_id", INT64, ["batch", "encoder_sequence"])
        logits, padding = twin_module(module).t2u_units(builder.op, states, chars, counts)
        vocab = module.config.t2u.vocab_size
        set_output(builder, logits, "logits", dtype, ["batch", "units", vocab])
        set_output(builder, padding, "padding_mask", INT64, ["batch", "units"])
        decoder = ir.Model(graph, ir_version=IR_VERSION, producer_name="mobius")
        return {"t2u_encoder/model": encoder, "t2u_decoder/model": decoder}


class TextToSpeechTranslationTask(UnitSpeechGraphs, Seq2SeqTask):
    """Text source; see the module docstring."""

    name = "text-to-speech-translation"


class SpeechToSpeechTranslationTask(UnitSpeechGraphs, SpeechToTextTask):
    """Audio source; see the module docstring."""

    name = "speech-to-speech-translation"


class TextToSpeechTranslationV2Task(CharacterUnitGraphs, Seq2SeqTask):
    """Text source, v2's unit model; see the module docstring."""

    name = "text-to-speech-translation-v2"


class SpeechToSpeechTranslationV2Task(CharacterUnitGraphs, SpeechToTextTask):
    """Audio source, v2's unit model; see the module docstring."""

    name = "speech-to-speech-translation-v2"
