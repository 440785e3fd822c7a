"""UniSpeech: the wav2vec2 encoder under the ``unispeech.`` prefix (its pre-training quantizer unused)."""

from __future__ import annotations

from mobius_audio.models.wav2vec2 import Wav2Vec2ForCTC


class UniSpeechForCTC(Wav2Vec2ForCTC):
    base_model_prefix = "unispeech"


MODEL_TYPES = {"unispeech": UniSpeechForCTC}
