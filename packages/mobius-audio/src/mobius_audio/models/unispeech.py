"""UniSpeech: the wav2vec2 encoder under the ``unispeech.`` prefix (its pre-training quantizer unused)."""

from __future__ import annotations

from mobius_audio.models.wav2vec2 import UTTERANCE_HEADS, Wav2Vec2ForCTC


class UniSpeechForCTC(Wav2Vec2ForCTC):
    base_model_prefix = "unispeech"
    heads = UTTERANCE_HEADS


MODEL_TYPES = {"unispeech": UniSpeechForCTC}
