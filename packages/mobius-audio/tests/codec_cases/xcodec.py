"""X-Codec: a tiny DAC (hidden 8, upsampling as the hub's configs write it) and a HuBERT or WavLM.

At 6 000 samples/s and 6 samples a frame, each stage of 16 rows is 4 kbps: 12 kbps
is 3 stages. The HuBERT's convolutions (kernels 9 and 2) give the acoustic encoder's
frame count on the clip as it is (the hub models' case); the WavLM's (kernels 3
and 2) one frame more, so the acoustic encoder runs on the padded clip.
"""

#: The acoustic DAC; ``hidden_size`` 8 is not the encoder's width (16), as in the hub configs.
ACOUSTIC = dict(
    encoder_hidden_size=4,
    downsampling_ratios=[2, 3],
    upsampling_ratios=[2, 3],
    decoder_hidden_size=16,
    hidden_size=8,
)

SEMANTIC = dict(
    model_type="hubert",
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    conv_dim=[8, 8],
    conv_kernel=[9, 2],
    conv_stride=[3, 2],
    num_conv_pos_embeddings=4,
    num_conv_pos_embedding_groups=2,
)

XCODEC = dict(
    acoustic_model_config=ACOUSTIC,
    semantic_model_config=SEMANTIC,
    sample_rate=6000,
    target_bandwidths=[4.0, 12.0],
    codebook_size=16,
    channel_ratios=[2, 1],
    strides=[1, 1],
    block_dilations=[1, 2],
)

EXTRACTOR = dict(hop_length=6, sampling_rate=6000)

CASES = {
    "xcodec-hubert": ("xcodec", XCODEC, "DacFeatureExtractor", EXTRACTOR),
    "xcodec-wavlm-padded": (
        "xcodec",
        dict(
            XCODEC,
            semantic_model_config=dict(SEMANTIC, model_type="wavlm", conv_kernel=[3, 2]),
        ),
        "DacFeatureExtractor",
        EXTRACTOR,
        dict(eps=("default",)),  # --ep cpu: checked on the HuBERT case
    ),
}
