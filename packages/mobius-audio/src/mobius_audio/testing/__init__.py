"""mobius-audio's parity kits (need torch and transformers: test-only).

Built on core's kit (:mod:`mobius.testing`): a tiny HF model made from a config,
every parameter perturbed with seeded noise, saved, built through the same path
as ``mobius build`` and compared in ONNX Runtime against PyTorch at fp32, here on
audio through the model's real feature extractor.
"""

from mobius_audio.testing._audio_language_parity import (
    check_batch_and_generate,
    check_hub_layout_builds_alike,
    check_python_m_generate,
    check_validate_passes,
    compare_audio_language,
    save_perturbed,
    tone_clip,
    transformers_text,
)
from mobius_audio.testing._audio_parity import (
    AudioParity,
    check_audio_parity,
    make_random_audio_model,
    random_audio_batch,
)
from mobius_audio.testing._speech_parity import (
    OnnxSpeechToText,
    check_speech_to_text_parity,
    save_whisper_bpe_tokenizer,
)
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
    "check_batch_and_generate",
    "check_hub_layout_builds_alike",
    "check_python_m_generate",
    "check_validate_passes",
    "compare_audio_language",
    "save_perturbed",
    "save_whisper_bpe_tokenizer",
    "tone_clip",
    "transformers_text",
    "check_speech_to_text_parity",
    "check_tts_parity",
    "make_random_audio_model",
    "make_random_vits",
    "random_audio_batch",
    "speak_with_torch",
]
