"""A tiny random Audio Flamingo 3 (or Music Flamingo) saved as transformers saves it.

The audio tower reads 16 mel bins over a one-second window (100 frames, 50 states, so
``max_source_positions`` 50; a window is 25 tokens); the text decoder is a two-layer
Qwen2. The tokenizer is mobius's word-level one holding the processor's special tokens;
every parameter is perturbed. Longer clips are cut into one-second windows by the
processor, as the hub's 30 s ones are.
"""

from __future__ import annotations

from pathlib import Path

from mobius.testing import perturb_parameters, tiny_tokenizer
from mobius_audio.testing import tone_clip

VOCAB = 128
SPECIAL = {
    "<sound>": 100,
    "<|sound_bos|>": 101,
    "<|sound_eos|>": 102,
    "<|im_start|>": 103,
    "<|im_end|>": 104,
    "<|endoftext|>": 105,
}
RATE = 16000
MAX_NEW_TOKENS = 8


def audio_config() -> dict:
    return dict(
        model_type="audioflamingo3_encoder", num_mel_bins=16, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, hidden_size=32, max_source_positions=50,
    )  # fmt: skip


def text_config() -> dict:
    return dict(
        model_type="qwen2", vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=512, eos_token_id=SPECIAL["<|im_end|>"],
    )  # fmt: skip


def hf_config(**extra):
    from transformers import AudioFlamingo3Config

    return AudioFlamingo3Config(
        audio_config=audio_config(), text_config=text_config(),
        audio_token_id=SPECIAL["<sound>"], **extra,
    )  # fmt: skip


def feature_extractor():
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor(feature_size=16, chunk_length=1, sampling_rate=RATE)


def tokenizer():
    return tiny_tokenizer(VOCAB, SPECIAL)


def processor():
    """transformers' ``AudioFlamingo3Processor`` over the tiny tokenizer and extractor."""
    from transformers import AudioFlamingo3Processor

    return AudioFlamingo3Processor(feature_extractor(), tokenizer())


def prompt(words: str) -> str:
    """The hub's chat layout (Qwen2's), the audio placeholder before the words."""
    return f"<|im_start|> <sound> {words} <|im_end|> <|im_start|>"


def save_model(directory: Path, model_class=None, config=None, made=None):
    """The tiny model (float32, eval, perturbed), saved with its processor files; returned."""
    import torch

    if model_class is None:
        from transformers import AudioFlamingo3ForConditionalGeneration as model_class
    torch.manual_seed(0)
    model = model_class(config or hf_config()).float().eval()
    perturb_parameters(model, seed=0)
    model.generation_config.eos_token_id = SPECIAL["<|im_end|>"]
    model.generation_config.pad_token_id = SPECIAL["<|endoftext|>"]
    model.save_pretrained(directory)
    made = made or processor()
    made.tokenizer.save_pretrained(directory)
    made.feature_extractor.save_pretrained(directory)
    return model


clip = tone_clip  # a tone with noise, float32 mono at 16 kHz
