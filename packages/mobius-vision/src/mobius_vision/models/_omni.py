"""What the Qwen Omni thinkers share: an audio tower beside a vision–language model, and the
whole checkpoints that hold the thinker under ``thinker.`` beside their speech output.

:class:`HearingConfig` and :class:`HearingMixin` add the audio encoder (``audio_tower``,
the family's ``audio_tower_class``) and the audio inputs of the
:mod:`~mobius_vision.tasks.audio_vision_language` contract to a VL config and model;
:class:`WholeConfig` and :class:`WholeCheckpointMixin` read a whole checkpoint (its
``thinker_config``, its ``thinker.`` tensors), leave the speech output out (ignored, by
the prefixes ``speech_prefixes``) and say so in the build's note (``left_out``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from onnxscript import nn

from mobius.config import first_of
from mobius.errors import ConfigError
from mobius_vision.models._compose import merge_image_features
from mobius_vision.models.qwen2_vl import INT64


class HearingConfig:
    """Mixed in before a VL config dataclass that declares ``audio`` and ``audio_token_id``."""

    audio_config_class: ClassVar[type]

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        audio_token = first_of(hf_config, "audio_token_id", "audio_token_index")
        if not isinstance(audio_token, int) or isinstance(audio_token, bool) or audio_token < 0:
            raise ConfigError(f"{hf_config.model_type}: audio_token_id {audio_token!r}")
        return dict(
            super().hf_fields(hf_config),
            audio=cls.audio_config_class.from_hf(hf_config.audio_config),
            audio_token_id=audio_token,
        )


class WholeConfig:
    """Mixed in before a thinker's config: a whole checkpoint's, whose ``thinker_config`` is built."""

    #: What the build leaves out, in its note (:class:`~mobius_vision.tasks.AudioVisionLanguageTask`).
    left_out: ClassVar[str]

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        thinker = getattr(hf_config, "thinker_config", None)
        if thinker is None:
            raise ConfigError(f"{hf_config.model_type}: the config has no thinker_config")
        return dict(super().hf_fields(thinker), model_type=hf_config.model_type)


class HearingMixin:
    """Mixed in before a VL model: ``audio_tower`` and the audio contract's hooks."""

    task = "audio-vision-language"
    audio_tower_class: ClassVar[type]

    def __init__(self, config) -> None:
        super().__init__(config)
        self.audio_tower = self.audio_tower_class(config.audio)

    def audio_inputs(self, dtype) -> list[tuple]:
        mels = self.config.audio.num_mel_bins
        return [
            ("input_features", dtype, ["num_audios", mels, "audio_frames"]),
            ("feature_attention_mask", INT64, ["num_audios", "audio_frames"]),
        ]

    def audio_outputs(self) -> list[tuple]:
        return [("audio_features", ["num_audio_tokens", self.config.text.hidden_size])]

    def audio_modules(self) -> list[nn.Module]:
        return [self.audio_tower]

    def audio_features(self, op, input_features, feature_attention_mask):
        return self.audio_tower(op, input_features, feature_attention_mask)

    def embed(self, op, input_ids, *features):
        """The VL model's embeddings of the image outputs (``features`` but the last), with the
        audio placeholders then replaced by ``audio_features`` (the last)."""
        *image_outputs, audio_features = features
        embeds, *extras = _values(super().embed(op, input_ids, *image_outputs))
        audio_token = self.config.audio_token_id
        embeds = merge_image_features(op, embeds, input_ids, audio_features, audio_token)
        return (embeds, *extras) if extras else embeds


def _values(result) -> list:
    return list(result) if isinstance(result, (tuple, list)) else [result]


class WholeCheckpointMixin:
    """Mixed in before a thinker: reads the ``thinker.`` tensors of a whole checkpoint."""

    #: The prefixes of the whole checkpoint's speech output, left out.
    speech_prefixes: ClassVar[tuple[str, ...]]

    @property
    def ignored(self) -> tuple[str, ...]:
        return (*super().ignored, *(f"{prefix}.*" for prefix in self.speech_prefixes))

    def sanitize(self, weights: dict) -> dict:
        prefix = "thinker."
        thinker = {
            name[len(prefix) :] if name.startswith(prefix) else name: tensor
            for name, tensor in weights.items()
        }
        return super().sanitize(thinker)
