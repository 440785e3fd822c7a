"""Data2Vec-Audio: odd and even position-conv kernels, every head, the weighted layer sum."""

from audio_encoder_cases.wav2vec2 import HEADS, SPEAKER_OPTIONS, WAV2VEC2, XVECTOR

DATA2VEC = dict(WAV2VEC2, num_conv_pos_embeddings=2, conv_pos_kernel_size=5)

CASES = {
    "data2vec-audio": ("data2vec-audio", DATA2VEC, dict(heads=HEADS)),
    "data2vec-audio-even-kernel-weighted-sum": (
        "data2vec-audio",
        dict(
            DATA2VEC,
            conv_pos_kernel_size=4,
            num_conv_pos_embeddings=3,
            use_weighted_layer_sum=True,
            conv_bias=False,
        ),
        dict(heads=HEADS),
    ),
    "data2vec-audio-speaker-heads": ("data2vec-audio", dict(DATA2VEC, **XVECTOR), SPEAKER_OPTIONS),
}
