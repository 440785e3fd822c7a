"""A tiny random Voxtral saved as the hub lays it out, with a tiny Tekken tokenizer.

The audio tower reads 16 mel bins over chunks of 40 frames (``max_source_positions`` 20),
its states stacked by four: five audio tokens a chunk. :func:`write_tekken` writes a
``tekken.json`` that mistral-common and transformers' ``MistralCommonBackend`` load: the
256 byte tokens and a few merges, 40 special tokens at Voxtral's ranks (``[AUDIO]`` 24,
``[BEGIN_AUDIO]`` 25, ``[TRANSCRIBE]`` 34, the rest as mistral-common numbers them) and
audio settings whose chunks match the tower's: 0.4 s (6400 samples, 40 frames of 160) at
12.5 audio tokens a second, five a chunk, as 30 s give the hub's 375. The text decoder is
a two-layer Llama over those 306 tokens; every parameter is perturbed, by noise
large enough that the greedy answer depends on the audio.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from _qwen2_audio_tiny import RATE, clip, write_wav  # the same 16 kHz test clips

from mobius.testing import perturb_parameters

__all__ = ["RATE", "clip", "write_wav"]

N_MELS, HOP = 16, 160
CHUNK_FRAMES = 40  # 2 * max_source_positions
CHUNK_SAMPLES = CHUNK_FRAMES * HOP
MAX_NEW_TOKENS = 8
#: transformers' VoxtralProcessor defaults to the hub's 30 s chunks; these are the tiny ones.
AUDIO_KWARGS = {"pad_to_multiple_of": CHUNK_SAMPLES, "max_source_positions": CHUNK_FRAMES}

SPECIAL = [
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]",
    "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
]  # fmt: skip
NAMED = {24: "[AUDIO]", 25: "[BEGIN_AUDIO]", 32: "[ARGS]", 33: "[CALL_ID]", 34: "[TRANSCRIBE]"}
NUM_SPECIAL = 40
MERGES = [b"th", b"the", b" the", b"in", b"an", b"er", b" a", b"on", b"at", b"en"]
VOCAB = NUM_SPECIAL + 256 + len(MERGES)
# tiktoken's pattern of the hub's tekken.json
PATTERN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def write_tekken(path: Path, chunk_length_s: float = CHUNK_SAMPLES / RATE) -> Path:
    """A tiny ``tekken.json`` (module docstring) at ``path``."""
    pieces = [bytes([i]) for i in range(256)] + MERGES
    vocab = [
        {"rank": rank, "token_bytes": base64.b64encode(piece).decode(), "token_str": None}
        for rank, piece in enumerate(pieces)
    ]
    names = SPECIAL + [NAMED.get(i, f"<SPECIAL_{i}>") for i in range(len(SPECIAL), NUM_SPECIAL)]
    special = [{"rank": i, "token_str": name, "is_control": True} for i, name in enumerate(names)]
    config = {
        "pattern": PATTERN, "num_vocab_tokens": len(vocab), "default_vocab_size": VOCAB,
        "default_num_special_tokens": NUM_SPECIAL, "version": "v7",
    }  # fmt: skip
    audio = {
        "sampling_rate": RATE, "frame_rate": 12.5, "chunk_length_s": chunk_length_s,
        "audio_encoding_config": {"num_mel_bins": N_MELS, "hop_length": HOP, "window_size": 400},
    }  # fmt: skip
    data = {"config": config, "vocab": vocab, "special_tokens": special, "version": 1,
            "type": "Tekken", "audio": audio}  # fmt: skip
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def hf_config():
    from transformers import VoxtralConfig

    audio = dict(
        model_type="voxtral_encoder", hidden_size=32, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_mel_bins=N_MELS,
        max_source_positions=CHUNK_FRAMES // 2,
    )  # fmt: skip
    text = dict(
        model_type="llama", vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        max_position_embeddings=512, rms_norm_eps=1e-5, eos_token_id=2, bos_token_id=1,
    )  # fmt: skip
    return VoxtralConfig(audio_config=audio, text_config=text, audio_token_id=24)


def processor(directory: Path):
    """transformers' ``VoxtralProcessor`` over the files of ``directory``."""
    from transformers import MistralCommonBackend, VoxtralProcessor, WhisperFeatureExtractor

    extractor = WhisperFeatureExtractor.from_pretrained(directory)
    return VoxtralProcessor(extractor, MistralCommonBackend.from_pretrained(directory))


def save_model(directory: Path):
    """The model, its ``tekken.json`` and ``preprocessor_config.json`` in ``directory``;
    returns the transformers model."""
    import torch
    from transformers import VoxtralForConditionalGeneration, WhisperFeatureExtractor

    torch.manual_seed(0)
    model = VoxtralForConditionalGeneration(hf_config()).float().eval()
    # noise of 0.2 (not 0.05): at 0.05 this model's greedy answer ignores the audio
    perturb_parameters(model, seed=0, scale=0.2)
    model.save_pretrained(directory)
    WhisperFeatureExtractor(feature_size=N_MELS, hop_length=HOP).save_pretrained(directory)
    write_tekken(directory / "tekken.json")
    return model
