"""UniSpeech-SAT: the wav2vec2 encoder under the ``unispeech_sat.`` prefix."""

from __future__ import annotations

from mobius_audio.models.wav2vec2 import Wav2Vec2ForCTC


class UniSpeechSatForCTC(Wav2Vec2ForCTC):
    base_model_prefix = "unispeech_sat"


MODEL_TYPES = {"unispeech-sat": UniSpeechSatForCTC}
