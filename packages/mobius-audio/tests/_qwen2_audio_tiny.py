"""A tiny random Qwen2-Audio saved as the hub lays it out, with its processor's files.

The audio tower reads 16 mel bins over a one-second window (100 frames, 50 states, so
``max_source_positions`` 50; a second of audio is 25 tokens); the text decoder is a
two-layer Qwen2. The tokenizer is mobius's word-level one holding Qwen2-Audio's special
tokens, with the processor's chat template; every parameter is perturbed.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from mobius.testing import perturb_parameters, tiny_tokenizer
from mobius_audio.testing import tone_clip

VOCAB = 128
SPECIAL = {
    "<|AUDIO|>": 100,
    "<|audio_bos|>": 101,
    "<|audio_eos|>": 102,
    "<|im_start|>": 103,
    "<|im_end|>": 104,
    "<|endoftext|>": 105,
}
RATE = 16000
MAX_NEW_TOKENS = 8


def hf_config():
    from transformers import Qwen2AudioConfig

    audio = dict(
        model_type="qwen2_audio_encoder", num_mel_bins=16, encoder_layers=2,
        encoder_attention_heads=4, encoder_ffn_dim=64, d_model=32, max_source_positions=50,
    )  # fmt: skip
    text = dict(
        model_type="qwen2", vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=512, eos_token_id=SPECIAL["<|im_end|>"],
    )  # fmt: skip
    return Qwen2AudioConfig(
        audio_config=audio, text_config=text, audio_token_index=SPECIAL["<|AUDIO|>"]
    )


def feature_extractor():
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor(feature_size=16, chunk_length=1, sampling_rate=RATE)


def processor(chat_template: bool = True):
    """transformers' ``Qwen2AudioProcessor`` over the tiny tokenizer and extractor."""
    from transformers import Qwen2AudioProcessor

    tokenizer = tiny_tokenizer(VOCAB, SPECIAL)
    made = Qwen2AudioProcessor(feature_extractor(), tokenizer)
    if not chat_template:
        made.chat_template = None
    return made


def save_model(directory: Path):
    """The tiny model (float32, eval, perturbed), saved with its processor files; returned."""
    import torch
    from transformers import Qwen2AudioForConditionalGeneration

    torch.manual_seed(0)
    model = Qwen2AudioForConditionalGeneration(hf_config()).float().eval()
    perturb_parameters(model, seed=0)
    model.generation_config.eos_token_id = SPECIAL["<|im_end|>"]
    model.generation_config.pad_token_id = SPECIAL["<|endoftext|>"]
    model.save_pretrained(directory)
    made = processor()
    made.tokenizer.chat_template = made.chat_template  # as the hub's tokenizer_config.json
    made.tokenizer.save_pretrained(directory)
    made.feature_extractor.save_pretrained(directory)
    return model


clip = tone_clip  # a tone with noise, float32 mono at 16 kHz


def write_wav(path: Path, samples: np.ndarray) -> np.ndarray:
    """``samples`` as a 16-bit WAV; returns what the file holds, as float32."""
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes(pcm.tobytes())
    return (pcm.astype(np.float64) / 32768).astype(np.float32)
