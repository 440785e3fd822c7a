"""The tiny CLAP shared by the CLAP tests: an unfused HTSAT, a RoBERTa, a 1 s extractor at 16 kHz."""

from __future__ import annotations

#: ClapFeatureExtractor's settings: 16 mel bins, 1 s windows of 51 frames (stretched to 64).
EXTRACTOR_OPTIONS = dict(
    feature_size=16,
    sampling_rate=16_000,
    hop_length=320,
    max_length_s=1,
    fft_window_size=512,
    frequency_min=50,
    frequency_max=8000,
)


def tiny_clap_config():
    """``ClapConfig``: Swin stages of 8x8 (shifted windows) and 4x4 patches, 2 text layers."""
    from transformers import ClapConfig

    text = dict(
        vocab_size=16,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        type_vocab_size=1,
        pad_token_id=1,
    )
    audio = dict(
        num_mel_bins=16,
        spec_size=32,
        patch_size=4,
        patch_stride=4,
        patch_embeds_hidden_size=16,
        depths=[2, 2],
        num_attention_heads=[2, 4],
        window_size=4,
        hidden_size=32,
        enable_fusion=False,
    )
    return ClapConfig(text_config=text, audio_config=audio, projection_dim=8)


#: A fused extractor: 64 mel bins (transformers shrinks long clips to 64), else the same.
FUSED_EXTRACTOR_OPTIONS = dict(EXTRACTOR_OPTIONS, feature_size=64)


def tiny_fused_clap_config():
    """A fused CLAP (``enable_fusion``): 64 mel bins folded twice into 128x128, 8x8 patches
    (16x16 tokens), crops through a 8x24 conv padded by one patch column."""
    config = tiny_clap_config()
    audio = config.audio_config
    audio.enable_fusion = True
    audio.num_mel_bins, audio.spec_size = 64, 128
    audio.patch_size, audio.patch_stride = 8, 8
    return config
