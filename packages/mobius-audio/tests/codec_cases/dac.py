"""DAC: two down/upsampling blocks (strides 2 and 3), three factorised codebooks."""

#: A tiny DAC: latent 16 channels, 6 samples a frame, 3 stages of 16 rows of 4 dims.
DAC = dict(
    encoder_hidden_size=4,
    downsampling_ratios=[2, 3],
    decoder_hidden_size=16,
    n_codebooks=3,
    codebook_size=16,
    codebook_dim=4,
    sampling_rate=16000,
)

CASES = {
    "dac": ("dac", DAC, "DacFeatureExtractor", dict(hop_length=6, sampling_rate=16000)),
}
