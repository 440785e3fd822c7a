"""mobius-audio's parity kits (need torch and transformers: test-only).

Built on core's kit (:mod:`mobius.testing`): a tiny HF model made from a config,
every parameter perturbed with seeded noise, saved, built through the same path
as ``mobius build`` and compared in ONNX Runtime against PyTorch at fp32, here on
audio through the model's real feature extractor.
"""

from mobius_audio.testing._audio_parity import (
    AudioParity,
    check_audio_parity,
    make_random_audio_model,
    random_audio_batch,
)
from mobius_audio.testing._speech_parity import OnnxSpeechToText, check_speech_to_text_parity
from mobius_audio.testing._tts_parity import (
    TINY_VOCAB,
    TtsParity,
    check_tts_parity,
    make_random_vits,
    speak_with_torch,
)

__all__ = [
    "AudioParity",
    "OnnxSpeechToText",
    "TINY_VOCAB",
    "TtsParity",
    "check_audio_parity",
    "check_speech_to_text_parity",
    "check_tts_parity",
    "make_random_audio_model",
    "make_random_vits",
    "random_audio_batch",
    "speak_with_torch",
]
