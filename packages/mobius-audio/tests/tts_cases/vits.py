"""VITS / MMS-TTS: tiny configs that reach each branch of the graphs.

``vits``: relative attention within a window shorter than the texts, an even FFN
kernel (asymmetric padding), dilated WaveNet layers, two resblock kernels and a
speaking rate other than 1. ``vits-multi-speaker``: speaker embeddings
conditioning the duration predictor, the flow's WaveNets and the vocoder, and a
relative-position window of 1. ``vits-deterministic-durations``: the conv duration
predictor (no duration noise).
"""

from mobius_audio.testing import TINY_VOCAB

VITS = dict(
    vocab_size=len(TINY_VOCAB),
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    window_size=2,
    ffn_dim=24,
    ffn_kernel_size=4,
    flow_size=8,
    upsample_initial_channel=16,
    upsample_rates=[2, 2],
    upsample_kernel_sizes=[4, 4],
    resblock_kernel_sizes=[3, 5],
    resblock_dilation_sizes=[[1, 2], [1, 3]],
    duration_predictor_num_flows=2,
    duration_predictor_flow_bins=4,
    duration_predictor_filter_channels=16,
    depth_separable_num_layers=2,
    prior_encoder_num_flows=2,
    prior_encoder_num_wavenet_layers=2,
    posterior_encoder_num_wavenet_layers=1,
    wavenet_dilation_rate=2,
    speaking_rate=1.3,
)

CASES = {
    "vits": ("vits", VITS, {}),
    "vits-multi-speaker": (
        "vits",
        dict(VITS, num_speakers=3, speaker_embedding_size=6, window_size=1),
        dict(speaker=2),
    ),
    "vits-deterministic-durations": (
        "vits",
        dict(VITS, use_stochastic_duration_prediction=False, duration_predictor_kernel_size=5),
        {},
    ),
}
