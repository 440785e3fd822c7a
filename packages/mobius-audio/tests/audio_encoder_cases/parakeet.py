"""Parakeet: the FastConformer encoder (``parakeet_encoder``) and ``ParakeetForCTC``.

The inputs are transformers' ``ParakeetFeatureExtractor`` log-mels (16 bins):
0.5 s and 0.35 s of audio give 50 and 35 real frames, 13 and 9 after the
subsampling (factor 4: two strided convs, the second a depthwise + pointwise
pair), so the padded frames of the shorter clip are masked in every conv and
attention score. Biases on, SiLU; a second CTC case turns the biases and the
input scaling off, uses GELU and subsamples by 8 (two depthwise + pointwise pairs).
"""

from transformers import ParakeetFeatureExtractor

ENCODER = dict(
    hidden_size=32,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=4,
    conv_kernel_size=5,
    subsampling_factor=4,
    subsampling_conv_channels=8,
    num_mel_bins=16,
)
EXTRACTOR = ParakeetFeatureExtractor(feature_size=16)
OPTIONS = dict(lengths=(8000, 5600), feature_extractor=EXTRACTOR)
CTC_ENCODER = dict(
    ENCODER,
    attention_bias=False,
    convolution_bias=False,
    hidden_act="gelu",
    scale_input=False,
    subsampling_factor=8,
)

CASES = {
    "parakeet-encoder": ("parakeet_encoder", ENCODER, OPTIONS),
    "parakeet-ctc": (
        "parakeet_ctc",
        dict(vocab_size=12, pad_token_id=11, encoder_config=ENCODER),
        dict(OPTIONS, heads=("ctc",)),
    ),
    "parakeet-ctc-no-bias-gelu": (
        "parakeet_ctc",
        dict(vocab_size=12, pad_token_id=11, encoder_config=CTC_ENCODER),
        dict(OPTIONS, heads=("ctc",), masks=(True,), eps=("default",)),
    ),
}
