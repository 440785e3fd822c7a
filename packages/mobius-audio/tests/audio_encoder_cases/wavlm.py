"""WavLM: group/layer conv norm, post-LN/stable layers, with few buckets so that the
79-frame batch reaches the log-spaced and the clamped buckets of the relative position bias."""

from audio_encoder_cases.wav2vec2 import HEADS, SPEAKER_OPTIONS, WAV2VEC2, XVECTOR

WAVLM = dict(WAV2VEC2, num_hidden_layers=3, num_buckets=16, max_bucket_distance=20)

CASES = {
    "wavlm-group-norm": (
        "wavlm",
        dict(WAVLM, feat_extract_norm="group"),
        dict(heads=HEADS),
    ),
    "wavlm-stable-layer-norm": (
        "wavlm",
        dict(
            WAVLM,
            feat_extract_norm="layer",
            do_stable_layer_norm=True,
            num_buckets=10,
            max_bucket_distance=30,
            num_conv_pos_embeddings=15,
            conv_bias=False,
            use_weighted_layer_sum=True,
        ),
        dict(heads=HEADS),
    ),
    "wavlm-layer-norm-post-ln-weighted-sum": (
        "wavlm",
        dict(WAVLM, feat_extract_norm="layer", use_weighted_layer_sum=True),
        dict(heads=("sequence-classification",)),
    ),
    "wavlm-speaker-heads": (
        "wavlm",
        dict(WAVLM, **XVECTOR, feat_extract_norm="group", use_weighted_layer_sum=True),
        SPEAKER_OPTIONS,
    ),
}
