"""SeamlessM4T (v1) speech output: text-to-speech and speech-to-speech translation.

``SeamlessM4TForTextToSpeech`` and ``SeamlessM4TForSpeechToSpeech`` are the
text-to-text and speech-to-text models (:mod:`mobius_audio.models.seamless_m4t_text`,
:mod:`mobius_audio.models.seamless_m4t`) with the text-to-unit model
(:mod:`mobius_audio.models._seamless_t2u`) and the unit vocoder
(:mod:`mobius_audio.models._seamless_vocoder`) after them. They share
``model_type`` with speech-to-text, so they are registered under their class
names: a checkpoint saved from either class builds by its ``architectures``, the
hub's all-in-one ``SeamlessM4TModel`` checkpoints (``facebook/hf-seamless-m4t-medium``,
``-large``: ``t2u_model.*``, ``vocoder.*`` beside the text and speech parts) with
``mobius build CHECKPOINT OUT --model-type SeamlessM4TForTextToSpeech`` (or
``SeamlessM4TForSpeechToSpeech``); the encoder the task does not run is left out.

The graphs and their names are the contract of
:mod:`mobius_audio.tasks_seamless_speech`. v2's unit model is non-autoregressive
(character-level upsampling and durations): :mod:`mobius_audio.models.seamless_m4t_v2_speech`
subclasses what changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mobius.components import module_scope
from mobius.errors import ConfigError
from mobius.tasks import set_output
from mobius_audio.models._seamless_t2u import (
    SeamlessM4TTextToUnitForConditionalGeneration,
    SeamlessM4TTextToUnitGraphs,
    t2u_config,
)
from mobius_audio.models._seamless_vocoder import CodeHifiGanConfig, SeamlessM4TCodeHifiGan
from mobius_audio.models.seamless_m4t import (
    SeamlessM4TConfig,
    SeamlessM4TForSpeechToText,
    SeamlessM4TTextDecoding,
)
from mobius_audio.models.seamless_m4t_text import SeamlessM4TForTextToText, SeamlessM4TTextConfig

#: The unit model's tied tables: a checkpoint saves either name (transformers' save: the first).
T2U_TIED = ("t2u_model.model.decoder.embed_tokens.weight", "t2u_model.lm_head.weight")


def speech_output_fields(hf: Any) -> dict[str, Any]:
    """The unit model's and the vocoder's configs of a (v1) SeamlessM4T config."""
    if hf.model_type != "seamless_m4t":
        raise ConfigError(
            f"{hf.model_type}: these speech-output classes are built for seamless_m4t (v1) only; "
            "build v2 with --model-type SeamlessM4Tv2ForTextToSpeech (or "
            "SeamlessM4Tv2ForSpeechToSpeech)"
        )
    return dict(t2u=t2u_config(hf), vocoder=CodeHifiGanConfig.from_hf(hf))


@dataclass
class SeamlessM4TTextToSpeechConfig(SeamlessM4TTextConfig):
    t2u: SeamlessM4TTextConfig | None = None
    vocoder: CodeHifiGanConfig | None = None
    #: The unit model's and the vocoder's fields (v2 reads its own).
    speech_fields = staticmethod(speech_output_fields)

    @classmethod
    def hf_fields(cls, hf: Any) -> dict[str, Any]:
        return dict(super().hf_fields(hf), **cls.speech_fields(hf))


@dataclass
class SeamlessM4TSpeechToSpeechConfig(SeamlessM4TConfig):
    t2u: SeamlessM4TTextConfig | None = None
    vocoder: CodeHifiGanConfig | None = None
    speech_fields = staticmethod(speech_output_fields)

    @classmethod
    def hf_fields(cls, hf: Any) -> dict[str, Any]:
        return dict(super().hf_fields(hf), **cls.speech_fields(hf))


class UnitSpeechOutput:
    """What a text model gains to speak (a mixin before it): ``t2u_model``, ``vocoder``, the
    decoder's ``last_hidden_state`` and the hooks of the speech-translation tasks."""

    t2u_class = SeamlessM4TTextToUnitForConditionalGeneration

    def __init__(self, config) -> None:
        super().__init__(config)
        self.t2u_model = self.t2u_class(config.t2u)
        self.vocoder = SeamlessM4TCodeHifiGan(config.vocoder)

    def decode(self, op, input_ids, encoder_attention_mask, self_cache, cross_cache):
        """The base's logits and presents; the decoder graph also outputs ``last_hidden_state``
        [batch, decoder_sequence, hidden], what the unit model reads."""
        with module_scope(op, self):
            hidden, presents = self.text_decoder(
                op, input_ids, encoder_attention_mask, self_cache, cross_cache
            )
            logits = self.lm_head(op, hidden)
        shape = ["batch", "decoder_sequence", self.config.hidden_size]
        set_output(op.builder, hidden, "last_hidden_state", hidden.dtype, shape)
        return logits, presents

    def text_to_unit(self) -> SeamlessM4TTextToUnitGraphs:
        """The unit model's seq2seq hooks, its parameters of this module's types."""
        units = SeamlessM4TTextToUnitGraphs(self.config.t2u)
        mine = units.t2u_model.parameters()
        for unit, ours in zip(mine, self.t2u_model.parameters(), strict=True):
            unit.type = ours.type
        return units

    def vocode(self, op, unit_ids, speaker_id, language_id):
        """``(waveform, waveform_lengths)`` of the units (see the vocoder's module)."""
        with module_scope(op, self):
            return self.vocoder(op, unit_ids, speaker_id, language_id)

    def sanitize(self, weights: dict) -> dict:
        """The text tables' tying, and the unit model's: tied, either saved name fills the table."""
        if self.config.t2u.tie_word_embeddings:
            table = next((weights[n] for n in T2U_TIED if n in weights), None)
            for name in T2U_TIED:
                weights.pop(name, None)
            if table is not None:
                weights[T2U_TIED[0]] = table
        return SeamlessM4TTextDecoding.sanitize(self, weights)


class SeamlessM4TForTextToSpeech(UnitSpeechOutput, SeamlessM4TForTextToText):
    """Text translation, its units and their waveform (the speech encoder left out)."""

    config_class = SeamlessM4TTextToSpeechConfig
    task = "text-to-speech-translation"
    ignored = ("speech_encoder.*",)


class SeamlessM4TForSpeechToSpeech(UnitSpeechOutput, SeamlessM4TForSpeechToText):
    """Speech translation, its units and their waveform (the text encoder left out)."""

    config_class = SeamlessM4TSpeechToSpeechConfig
    task = "speech-to-speech-translation"
    ignored = (
        "text_encoder.*",
        "speech_encoder.encoder.layers.*.conv_module.batch_norm.num_batches_tracked",
    )


MODEL_TYPES = {
    "SeamlessM4TForTextToSpeech": SeamlessM4TForTextToSpeech,
    "SeamlessM4TForSpeechToSpeech": SeamlessM4TForSpeechToSpeech,
}
