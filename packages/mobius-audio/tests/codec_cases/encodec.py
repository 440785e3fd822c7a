"""EnCodec: causal and non-causal (reflect and constant padding), mono and stereo, 2 LSTM layers;
the 48 kHz form (group norm, normalised overlapping chunks)."""

#: A tiny EnCodec: strides 3 and 2 (6 samples a frame), 16-dim latents, 4 stages of 16 rows.
ENCODEC = dict(
    target_bandwidths=[8.0, 16.0],  # 1 000 frames/s x 4 bits a code: 2 and 4 codebooks
    sampling_rate=6000,
    audio_channels=1,
    hidden_size=16,
    num_filters=4,
    num_residual_layers=1,
    upsampling_ratios=[3, 2],
    kernel_size=5,
    last_kernel_size=5,
    residual_kernel_size=3,
    num_lstm_layers=2,
    codebook_size=16,
)

#: ``facebook/encodec_48khz``'s settings, at the tiny model's rate.
CHUNKED = dict(
    audio_channels=2,
    use_causal_conv=False,
    norm_type="time_group_norm",
    normalize=True,
    chunk_length_s=0.101,
    overlap=0.1,
)

CASES = {
    "encodec-causal-reflect": (
        "encodec",
        ENCODEC,
        "EncodecFeatureExtractor",
        dict(sampling_rate=6000),
        dict(lengths=(1500, 1100)),  # 0.25 s and 0.18 s
    ),
    # the 48 kHz model's form: stereo, group norm, each chunk normalised, chunks of 606
    # samples (101 frames) every 545: a batch padded to 1696 is 3 whole chunks and one of 61
    "encodec-48khz-chunked": (
        "encodec",
        dict(ENCODEC, **CHUNKED),
        "EncodecFeatureExtractor",
        dict(sampling_rate=6000, feature_size=2, chunk_length_s=0.101, overlap=0.1),
        dict(lengths=(1500, 1100), eps=("default",)),
    ),
    "encodec-stereo-non-causal-constant": (
        "encodec",
        dict(ENCODEC, audio_channels=2, use_causal_conv=False, pad_mode="constant"),
        "EncodecFeatureExtractor",
        dict(sampling_rate=6000, feature_size=2),
        dict(lengths=(1500, 1100), eps=("default",)),  # --ep cpu: checked on the mono case
    ),
}
