"""A tiny Whisper: config, its real feature extractor over a one-second window, a tiny tokenizer.

``WHISPER_30S`` is the same model over the released checkpoints' 30 s window, with
every timestamp token of that window (``<|0.00|>`` .. ``<|30.00|>``, ids 60 to 1560),
for long-form transcription.

The special tokens sit at the end of a 64-token vocabulary in Whisper's order:
``<|endoftext|>``, ``<|startoftranscript|>``, languages, ``<|translate|>``,
``<|transcribe|>``, ``<|startoflm|>``, ``<|startofprev|>``, ``<|nospeech|>``,
``<|notimestamps|>``.
"""

from __future__ import annotations

SPECIAL = {
    "<|endoftext|>": 50,
    "<|startoftranscript|>": 51,
    "<|en|>": 52,
    "<|de|>": 53,
    "<|translate|>": 54,
    "<|transcribe|>": 55,
    "<|startoflm|>": 56,
    "<|startofprev|>": 57,
    "<|nospeech|>": 58,
    "<|notimestamps|>": 59,
}
PROMPT = (51, 52, 55, 59)  # start, English, transcribe, no timestamps

WHISPER = dict(
    vocab_size=64,
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=37,
    decoder_ffn_dim=37,
    num_mel_bins=80,
    max_source_positions=50,  # a one-second window: 100 frames, halved by conv2
    max_target_positions=40,
    pad_token_id=50,
    bos_token_id=50,
    eos_token_id=50,
    decoder_start_token_id=51,
    suppress_tokens=None,
    begin_suppress_tokens=None,
    # At transformers' 0.02 the tiny decoder repeats one token whatever it hears; at 0.4
    # the greedy streams vary and differ between the two clips.
    init_std=0.4,
)


# 1500 encoder positions: 3000 feature frames, 30 s; 1501 timestamp tokens after <|notimestamps|>.
WHISPER_30S = dict(
    WHISPER, vocab_size=60 + 1501, max_source_positions=1500, max_target_positions=64
)


def feature_extractor(num_mel_bins: int = 80):
    """The real WhisperFeatureExtractor with a one-second window (16 kHz, hop 160: 100 frames)."""
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor(feature_size=num_mel_bins, chunk_length=1)


def set_generation_config(model, **extra) -> None:
    """Whisper's generation config in the tiny vocabulary: English transcription, no timestamps."""
    config = model.generation_config
    config.lang_to_id = {"<|en|>": 52, "<|de|>": 53}
    config.task_to_id = {"translate": 54, "transcribe": 55}
    config.no_timestamps_token_id = 59
    config.language, config.task = "en", "transcribe"
    config.decoder_start_token_id = 51
    config.eos_token_id = config.pad_token_id = 50
    config.is_multilingual = True
    config.forced_decoder_ids = None
    config.suppress_tokens = None
    config.begin_suppress_tokens = None
    for key, value in extra.items():
        setattr(config, key, value)
