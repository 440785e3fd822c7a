"""unispeech-sat: the wav2vec2 variants under its own prefix."""

from audio_encoder_cases.wav2vec2 import HEADS, SPEAKER_OPTIONS, WAV2VEC2, XVECTOR

CASES = {
    "unispeech-sat-group-norm": (
        "unispeech-sat",
        dict(WAV2VEC2, feat_extract_norm="group"),
        dict(heads=HEADS),
    ),
    "unispeech-sat-stable-layer-norm": (
        "unispeech-sat",
        dict(
            WAV2VEC2,
            feat_extract_norm="layer",
            do_stable_layer_norm=True,
            use_weighted_layer_sum=True,
        ),
        dict(heads=HEADS),
    ),
    "unispeech-sat-speaker-heads": (
        "unispeech-sat",
        dict(WAV2VEC2, **XVECTOR, feat_extract_norm="layer", do_stable_layer_norm=True),
        SPEAKER_OPTIONS,
    ),
}
