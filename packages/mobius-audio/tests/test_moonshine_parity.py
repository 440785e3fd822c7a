"""Moonshine's encoder, reduced mask and cached decoder against PyTorch, on a padded batch.

A tiny random MoonshineForConditionalGeneration (every parameter perturbed) is
built with the CLI path; two random waveforms (0.6 s and 1 s) go through the real
Wav2Vec2FeatureExtractor (Moonshine's: raw samples, zero padding, a sample mask);
the encoder's ``last_hidden_state`` and ``encoder_attention_mask``, the decoder's
prefill of the start token and 8 greedy steps through both caches must be within
1e-4 of PyTorch, the tokens equal to transformers' ``generate``.
"""

from __future__ import annotations

import pytest
from transformers import AutoConfig, Wav2Vec2FeatureExtractor

from mobius.errors import ConfigError
from mobius_audio.models.moonshine import MoonshineConfig
from mobius_audio.testing import check_speech_to_text_parity

MOONSHINE = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=37,
    encoder_num_hidden_layers=2,
    decoder_num_hidden_layers=2,
    encoder_num_attention_heads=4,
    decoder_num_attention_heads=4,
    max_position_embeddings=64,
    decoder_start_token_id=1,
    bos_token_id=1,
    eos_token_id=2,
    initializer_range=0.4,  # varied greedy streams
)


def rope(partial: float) -> dict:
    return {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": partial}


CASES = {
    # head_dim 8: int(8 * 0.9) = 7 channels give 4 frequencies, so all 8 rotate
    "moonshine": dict(MOONSHINE, rope_parameters=rope(0.9)),
    # head_dim 32: 28 of 32 channels rotate; biased projections, untied, padded heads
    "moonshine-partial-bias-untied": dict(
        MOONSHINE, hidden_size=64, encoder_num_attention_heads=2, decoder_num_attention_heads=2,
        rope_parameters=rope(0.9), attention_bias=True, tie_word_embeddings=False,
        pad_head_dim_to_multiple_of=48, decoder_hidden_act="gelu",
    ),
    # head_dim 16 with full rotation: GroupQueryAttention rotates in its kernel (--ep cpu)
    "moonshine-fused-rotary": dict(MOONSHINE, hidden_size=64, rope_parameters=rope(1.0)),
}  # fmt: skip


def feature_extractor() -> Wav2Vec2FeatureExtractor:
    """Moonshine's extractor settings: 16 kHz samples as they are, zero padding, a mask."""
    return Wav2Vec2FeatureExtractor(
        feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=False,
        return_attention_mask=True,
    )  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_moonshine_parity(case, tmp_path):
    overrides = CASES[case]
    hf_config = AutoConfig.for_model("moonshine", **overrides)
    prompt = (overrides["decoder_start_token_id"],)
    results = check_speech_to_text_parity(hf_config, feature_extractor(), tmp_path, prompt=prompt)
    for result in results:
        assert len(result.decode_diffs) == 8
        tokens = {t for step in result.onnx_tokens for t in step}
        assert len(tokens) > 1, "degenerate greedy streams: the check would prove little"


@pytest.mark.parametrize(
    "overrides",
    [
        dict(decoder_num_attention_heads=2),  # transformers writes one count over the other
        dict(encoder_num_key_value_heads=2),  # transformers reshapes queries by kv heads
        dict(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 2.0}),
    ],
)
def test_moonshine_refuses(overrides):
    hf_config = AutoConfig.for_model("moonshine", **dict(MOONSHINE, **overrides))
    with pytest.raises(ConfigError):
        MoonshineConfig.from_hf(hf_config)
