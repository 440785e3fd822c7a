"""Speech2Text's encoder, reduced mask and cached decoder against PyTorch, on a padded batch.

A tiny random Speech2TextForConditionalGeneration (every parameter perturbed) is
built with the CLI path; two random waveforms (0.6 s and 1 s) go through the real
Speech2TextFeatureExtractor's numpy path, padded to the longer with its attention
mask; the encoder's ``last_hidden_state`` and ``encoder_attention_mask``, the
decoder's prefill of the start token and 8 greedy steps through both caches must
be within 1e-4 of PyTorch, the tokens equal to transformers' ``generate``.
"""

from __future__ import annotations

import pytest
from transformers import AutoConfig, Speech2TextFeatureExtractor

from mobius.errors import ConfigError
from mobius_audio.models.speech_to_text import Speech2TextConfig
from mobius_audio.testing import check_speech_to_text_parity

SPEECH2TEXT = dict(
    vocab_size=64,
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=37,
    decoder_ffn_dim=37,
    conv_channels=24,
    conv_kernel_sizes=[5, 5],
    input_feat_per_channel=80,
    max_source_positions=60,
    max_target_positions=40,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
    init_std=0.4,  # varied greedy streams (at 0.02 a tiny decoder repeats one token)
)

CASES = {
    "speech_to_text": SPEECH2TEXT,
    # three convs (odd and even kernels), GELU, unscaled, untied, an odd width, pad id 0
    "speech_to_text-3conv-gelu-untied": dict(
        SPEECH2TEXT, num_conv_layers=3, conv_kernel_sizes=[3, 4, 5], activation_function="gelu",
        scale_embedding=False, tie_word_embeddings=False, d_model=30, encoder_attention_heads=3,
        decoder_attention_heads=2, pad_token_id=0, bos_token_id=1, input_feat_per_channel=40,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_speech_to_text_parity(case, tmp_path):
    overrides = CASES[case]
    hf_config = AutoConfig.for_model("speech_to_text", **overrides)
    bins = overrides["input_feat_per_channel"]
    extractor = Speech2TextFeatureExtractor(feature_size=bins, num_mel_bins=bins)
    prompt = (overrides["decoder_start_token_id"],)
    results = check_speech_to_text_parity(hf_config, extractor, tmp_path, prompt=prompt)
    for result in results:
        assert len(result.decode_diffs) == 8
        tokens = {t for step in result.onnx_tokens for t in step}
        assert len(tokens) > 1, "degenerate greedy streams: the check would prove little"


def test_speech_to_text_refuses_mismatched_kernels():
    hf_config = AutoConfig.for_model("speech_to_text", **SPEECH2TEXT)
    hf_config.conv_kernel_sizes = [5]
    with pytest.raises(ConfigError, match="conv_kernel_sizes"):
        Speech2TextConfig.from_hf(hf_config)
