"""Mimi: causal SEANet convs, a windowed transformer, split semantic/acoustic codebooks.

``mimi``: the hub model's shape in miniature (strides 3 and 2, then the latent stride
2 of ``downsample``: 12 samples a frame; one semantic and three acoustic stages
with 8-dim projections; grouped ``upsample``; a sliding window of 8 frames; two
key/value heads shared by four query heads). ``mimi-non-causal-no-projection``:
quantizers of the hidden size (no projections), two semantic stages, non-causal
convs, one key/value head per query head.
"""

#: 6 000 samples/s over strides 3 x 2: 1 000 frames/s in the transformers, 500 codes/s.
MIMI = dict(
    sampling_rate=6000,
    audio_channels=1,
    hidden_size=16,
    num_filters=4,
    num_residual_layers=1,
    upsampling_ratios=[3, 2],
    kernel_size=5,
    last_kernel_size=3,
    residual_kernel_size=3,
    num_hidden_layers=2,
    intermediate_size=32,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=4,
    sliding_window=8,
    codebook_size=16,
    codebook_dim=8,
    vector_quantization_hidden_dimension=8,
    num_quantizers=4,
    num_semantic_quantizers=1,
    upsample_groups=8,
    layer_scale_initial_scale=0.5,  # the transformers' branches count (hub init: 0.01)
)

CASES = {
    "mimi": (
        "mimi",
        MIMI,
        "EncodecFeatureExtractor",
        dict(sampling_rate=6000),
        dict(lengths=(1500, 1100)),  # 0.25 s and 0.18 s
    ),
    "mimi-non-causal-no-projection": (
        "mimi",
        dict(
            MIMI,
            num_key_value_heads=4,
            codebook_dim=16,
            vector_quantization_hidden_dimension=16,
            num_semantic_quantizers=2,
            use_causal_conv=False,
        ),
        "EncodecFeatureExtractor",
        dict(sampling_rate=6000),
        dict(lengths=(700, 500), eps=("default",)),
    ),
}
