"""SeamlessM4T v2 speech output: v1's (:mod:`mobius_audio.models.seamless_m4t_speech`) with v2's unit model.

What changes from v1: the text-to-unit model is non-autoregressive
(:mod:`mobius_audio.models._seamless_v2_t2u`: character upsampling, durations,
conv layers, one argmax over every frame), so its graphs are the ``...-v2``
contracts of :mod:`mobius_audio.tasks_seamless_speech`. The text parts are v2's
(text-to-text as v1's; speech-to-text with v2's conformer), the vocoder is v1's
(``SeamlessM4Tv2CodeHifiGan`` computes what ``SeamlessM4TCodeHifiGan`` does, but
pads its duration convs "same", so it runs any ``variance_predictor_kernel_size``).

``SeamlessM4Tv2ForTextToSpeech`` and ``SeamlessM4Tv2ForSpeechToSpeech`` build a
checkpoint saved from either class, and the hub's all-in-one ``SeamlessM4Tv2Model``
(``facebook/seamless-m4t-v2-large``) with ``--model-type SeamlessM4Tv2ForTextToSpeech``
(or ``...ForSpeechToSpeech``); the encoder the task does not run is left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from mobius.components import module_scope
from mobius.errors import ConfigError
from mobius_audio.models._seamless_v2_t2u import (
    SeamlessM4Tv2TextToUnitForConditionalGeneration,
    v2_t2u_config,
)
from mobius_audio.models._seamless_vocoder import CodeHifiGanConfig
from mobius_audio.models.seamless_m4t import SeamlessM4TTextDecoding, config_int
from mobius_audio.models.seamless_m4t_speech import (
    T2U_TIED,
    SeamlessM4TSpeechToSpeechConfig,
    SeamlessM4TTextToSpeechConfig,
    UnitSpeechOutput,
)
from mobius_audio.models.seamless_m4t_text import SeamlessM4TForTextToText
from mobius_audio.models.seamless_m4t_v2 import SeamlessM4Tv2Config, SeamlessM4Tv2ForSpeechToText

T2U_HEAD, T2U_TABLE = T2U_TIED[1], T2U_TIED[0]


class CodeHifiGanV2Config(CodeHifiGanConfig):
    @classmethod
    def duration_kernel_of(cls, hf: Any) -> int:
        """v2's duration predictor pads "same": any kernel runs."""
        return config_int(hf, "variance_predictor_kernel_size", 1)


def v2_speech_output_fields(hf: Any) -> dict[str, Any]:
    """The v2 unit model's and the vocoder's configs of a SeamlessM4T v2 config."""
    if hf.model_type != "seamless_m4t_v2":
        raise ConfigError(
            f"{hf.model_type}: the SeamlessM4Tv2 speech-output classes build seamless_m4t_v2 "
            "only; build v1 with --model-type SeamlessM4TForTextToSpeech (or "
            "SeamlessM4TForSpeechToSpeech)"
        )
    return dict(t2u=v2_t2u_config(hf), vocoder=CodeHifiGanV2Config.from_hf(hf))


@dataclass
class SeamlessM4Tv2TextToSpeechConfig(SeamlessM4TTextToSpeechConfig):
    speech_fields = staticmethod(v2_speech_output_fields)


@dataclass
class SeamlessM4Tv2SpeechToSpeechConfig(SeamlessM4TSpeechToSpeechConfig, SeamlessM4Tv2Config):
    speech_fields = staticmethod(v2_speech_output_fields)


class CharacterUnitSpeechOutput(UnitSpeechOutput):
    """v1's speech output with v2's non-autoregressive unit model; its tasks call
    :meth:`t2u_encode` and :meth:`t2u_units` (not v1's ``text_to_unit``)."""

    t2u_class = SeamlessM4Tv2TextToUnitForConditionalGeneration

    def t2u_encode(self, op, inputs_embeds, attention_mask):
        """The unit encoder's states [batch, text, hidden]."""
        t2u = self.t2u_model
        with module_scope(op, self, t2u, t2u.model):
            return t2u.model.encoder(op, inputs_embeds, attention_mask)

    def t2u_units(self, op, encoder_hidden_states, char_input_ids, char_count_per_id):
        """``(logits [batch, frames, t2u_vocab_size], padding_mask int64 [batch, frames])``."""
        t2u = self.t2u_model
        with module_scope(op, self, t2u):
            with module_scope(op, t2u.model):
                hidden, mask = t2u.model.decoder(
                    op, encoder_hidden_states, char_input_ids, char_count_per_id
                )
            return t2u.lm_head(op, hidden), op.Cast(mask, to=ir.DataType.INT64)

    def sanitize(self, weights: dict) -> dict:
        """The decoder's unit table is read only as the tied head: tied, either name fills
        ``lm_head``; untied, the table is left out."""
        table = weights.pop(T2U_TABLE, None)
        if self.config.t2u.tie_word_embeddings and table is not None:
            weights.setdefault(T2U_HEAD, table)
        return SeamlessM4TTextDecoding.sanitize(self, weights)


class SeamlessM4Tv2ForTextToSpeech(CharacterUnitSpeechOutput, SeamlessM4TForTextToText):
    """Text translation, its units and their waveform (the speech encoder left out)."""

    config_class = SeamlessM4Tv2TextToSpeechConfig
    task = "text-to-speech-translation-v2"
    ignored = ("speech_encoder.*",)


class SeamlessM4Tv2ForSpeechToSpeech(CharacterUnitSpeechOutput, SeamlessM4Tv2ForSpeechToText):
    """Speech translation, its units and their waveform (the text encoder left out)."""

    config_class = SeamlessM4Tv2SpeechToSpeechConfig
    task = "speech-to-speech-translation-v2"
    ignored = ("text_encoder.*",)


MODEL_TYPES = {
    "SeamlessM4Tv2ForTextToSpeech": SeamlessM4Tv2ForTextToSpeech,
    "SeamlessM4Tv2ForSpeechToSpeech": SeamlessM4Tv2ForSpeechToSpeech,
}
