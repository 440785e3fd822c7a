"""SpeechT5 speech recognition: encoder, reduced mask and cached decoder against PyTorch.

A tiny random SpeechT5ForSpeechToText (every parameter perturbed) is built with the
CLI path; two random waveforms (0.3 s and 0.5 s) go through the real
SpeechT5FeatureExtractor, padded to the longer with its attention mask; the
encoder's ``last_hidden_state`` and ``encoder_attention_mask``, the decoder's prefill
of the start token and 8 greedy steps through both caches must be within 1e-4 of
PyTorch, the tokens equal to transformers' ``generate``. The relative position
table is short (``encoder_max_relative_position``) so that the clamp is exercised.
"""

from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoConfig, SpeechT5FeatureExtractor

from mobius.errors import ConfigError
from mobius_audio.generate import extract_inputs
from mobius_audio.models.speecht5 import SpeechT5Config
from mobius_audio.testing import check_speech_to_text_parity
from mobius_audio.testing._speech_parity import random_audio

SPEECHT5 = dict(
    vocab_size=64,
    hidden_size=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=37,
    decoder_ffn_dim=37,
    conv_dim=[16, 16, 16],
    conv_kernel=[10, 8, 4],
    conv_stride=[5, 4, 4],
    num_conv_pos_embeddings=16,  # even: the extra frame is cut
    num_conv_pos_embedding_groups=4,
    encoder_max_relative_position=8,  # under the ~60 frames of 0.3 s: the clamp is reached
    max_speech_positions=200,
    max_text_positions=40,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
    initializer_range=0.1,  # varied greedy streams (at 0.02 both rows decode alike)
)

CASES = {
    "speecht5": (SPEECHT5, dict()),
    # layer-normed convs with biases, an odd position kernel, relu, scaled and untied
    # embeddings, an odd width, uneven heads; the extractor normalises each clip
    "speecht5-layer-norm-scaled-untied": (
        dict(
            SPEECHT5, feat_extract_norm="layer", conv_bias=True, num_conv_pos_embeddings=7,
            num_conv_pos_embedding_groups=2, hidden_act="relu", scale_embedding=True,
            tie_word_embeddings=False, hidden_size=30, encoder_attention_heads=3,
            decoder_attention_heads=2, encoder_max_relative_position=5,
        ),
        dict(do_normalize=True),
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_speecht5_parity(case, tmp_path):
    overrides, extractor_options = CASES[case]
    hf_config = AutoConfig.for_model(
        "speecht5", architectures=["SpeechT5ForSpeechToText"], **overrides
    )
    extractor = SpeechT5FeatureExtractor(**extractor_options)
    prompt = (overrides["decoder_start_token_id"],)
    eps = ("default", "cpu") if case == "speecht5" else ("default",)
    results = check_speech_to_text_parity(
        hf_config, extractor, tmp_path, prompt=prompt, seconds=(0.3, 0.5), eps=eps
    )
    for result in results:
        assert len(result.decode_diffs) == 8
        tokens = {t for step in result.onnx_tokens for t in step}
        assert len(tokens) > 1, "degenerate greedy streams: the check would prove little"


@pytest.mark.parametrize("do_normalize", [False, True])
def test_speecht5_features_are_the_extractors(do_normalize):
    """The runner's feeds (numpy, torch hidden from the extractor) equal its own output."""
    extractor = SpeechT5FeatureExtractor(do_normalize=do_normalize)
    waves = random_audio((0.2, 0.35), 16000, seed=3)
    feeds = extract_inputs(extractor, waves, 16000, "input_values", mask=True)
    expected = extractor(waves, sampling_rate=16000, padding=True, return_tensors="np")
    assert feeds["input_values"].dtype == np.float32
    np.testing.assert_allclose(feeds["input_values"], expected["input_values"], atol=1e-5, rtol=0)
    np.testing.assert_array_equal(feeds["attention_mask"], expected["attention_mask"])
    assert feeds["attention_mask"][0].sum() == len(waves[0]) < feeds["attention_mask"].shape[1]
    if do_normalize:  # each clip zero-mean, unit-variance over its real samples
        real = feeds["input_values"][0, : len(waves[0])]
        assert abs(real.mean()) < 1e-5 and abs(real.std() - 1) < 1e-3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(architectures=["SpeechT5ForTextToSpeech"]), "SpeechT5ForTextToSpeech is not built"),
        (dict(pad_token_id=None), "positions count from pad_token_id"),
        (dict(encoder_max_relative_position=0), "encoder_max_relative_position"),
        (dict(hidden_size=30), "split evenly"),
        (dict(conv_stride=[5, 0, 4]), "conv sizes must be positive"),
    ],
)
def test_speecht5_refuses(change, message):
    hf_config = AutoConfig.for_model("speecht5", **SPEECHT5)
    for key, value in change.items():
        setattr(hf_config, key, value)
    with pytest.raises(ConfigError, match=message):
        SpeechT5Config.from_hf(hf_config)
