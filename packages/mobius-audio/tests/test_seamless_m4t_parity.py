"""SeamlessM4T v1 and v2 speech-to-text against PyTorch, on a padded batch of two clips.

A tiny random ``SeamlessM4T(v2)ForSpeechToText`` (every parameter perturbed) is
built with the CLI path; two waveforms (0.6 s and 1 s) go through the real
SeamlessM4TFeatureExtractor's numpy path, padded to the longer with its mask. The
encoder's ``last_hidden_state`` and pooled ``encoder_attention_mask``, the
decoder's prefill of ``</s> __fra__`` and 8 greedy steps through both caches must
be within 1e-4 of PyTorch. v1 runs rotary and relative positions, v2
``relative_key`` with chunked attention and two adapter layers (transformers
masks both with one pooling's lengths).
"""

from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoConfig, SeamlessM4TFeatureExtractor

from mobius.errors import ConfigError
from mobius_audio.generate import extract_inputs
from mobius_audio.models.seamless_m4t import SeamlessM4TConfig
from mobius_audio.testing import check_speech_to_text_parity
from mobius_audio.testing._speech_parity import random_audio

LANGUAGES = {"fra": 5, "eng": 6}  # generation_config.text_decoder_lang_to_code_id

TINY = dict(
    vocab_size=64,
    hidden_size=32,
    decoder_layers=2,
    decoder_attention_heads=4,
    decoder_ffn_dim=37,
    encoder_layers=1,
    encoder_attention_heads=4,
    encoder_ffn_dim=37,
    speech_encoder_layers=2,
    speech_encoder_attention_heads=4,
    speech_encoder_intermediate_size=40,
    conv_depthwise_kernel_size=5,
    max_position_embeddings=64,
    t2u_encoder_layers=1,
    t2u_decoder_layers=1,
    t2u_vocab_size=16,
    unit_hifi_gan_vocab_size=8,
    adaptor_kernel_size=8,
    adaptor_stride=8,
    speech_encoder_layerdrop=0.0,
)

# model_type, config overrides, clip lengths (s): each batch has padded pooled frames
CASES = {
    "seamless_m4t-rotary": ("seamless_m4t", dict(TINY, position_embeddings_type="rotary"), (0.6, 1.0)),
    # relative positions, an untied head, GELU in the decoder, a 2-wide stride-2 adapter
    "seamless_m4t-relative": ("seamless_m4t", dict(
        TINY, position_embeddings_type="relative", tie_word_embeddings=False,
        activation_function="gelu", adaptor_kernel_size=3, adaptor_stride=2,
    ), (0.6, 1.0)),
    # chunks of 8 frames, 4 to the left (every padded frame's window still holds a real
    # one: see the module's docstring); two adapter layers (kernel 3, stride 2) whose
    # masks keep one pooling's lengths: the shorter clip is under half the longer
    "seamless_m4t_v2": ("seamless_m4t_v2", dict(
        TINY, speech_encoder_chunk_size=8, speech_encoder_left_chunk_num=4,
        left_max_position_embeddings=6, right_max_position_embeddings=3,
        num_adapter_layers=2, adaptor_kernel_size=3, adaptor_stride=2,
        tie_word_embeddings=False,  # tied, this tiny decoder repeats one token
    ), (0.4, 1.0)),
}  # fmt: skip


def hf_config(case: str):
    model_type, overrides, _ = CASES[case]
    return AutoConfig.for_model(model_type, **overrides)


def reference_attention(model) -> None:
    """SDPA for the reference: v2's chunked mask is a 4-D bool mask, which transformers' eager
    attention adds to the scores as 1/0 (nothing masked); SDPA masks with it, as intended."""
    model.set_attn_implementation("sdpa")


@pytest.mark.parametrize("case", sorted(CASES))
def test_seamless_m4t_parity(case, tmp_path):
    config = hf_config(case)
    prompt = (config.decoder_start_token_id, LANGUAGES["fra"])
    results = check_speech_to_text_parity(
        config, SeamlessM4TFeatureExtractor(), tmp_path, prompt=prompt, seconds=CASES[case][2],
        generate=False, eps=("cpu",), prepare=reference_attention,
    )  # fmt: skip
    for result in results:
        assert len(result.decode_diffs) == 8
        tokens = {t for step in result.onnx_tokens for t in step}
        assert len(tokens) > 1, "degenerate greedy streams: the check would prove little"


def test_feature_extractor_numpy_path_equals_the_default():
    """The runner's torch-free path gives transformers' default features (within 1e-5)."""
    extractor = SeamlessM4TFeatureExtractor()
    waves = random_audio((0.3, 0.5), extractor.sampling_rate, seed=3)
    ours = extract_inputs(extractor, waves, extractor.sampling_rate, mask=True)
    theirs = extractor(
        waves, sampling_rate=extractor.sampling_rate, padding=True, return_tensors="np"
    )
    assert ours["input_features"].shape == theirs["input_features"].shape
    assert np.abs(ours["input_features"] - theirs["input_features"]).max() <= 1e-5
    assert (ours["attention_mask"] == theirs["attention_mask"]).all()


def test_seamless_m4t_refuses_unbuilt_positions():
    config = hf_config("seamless_m4t-rotary")
    config.position_embeddings_type = "relative_key"  # v2's, not v1's
    with pytest.raises(ConfigError, match="position_embeddings_type='relative_key' is not built"):
        SeamlessM4TConfig.from_hf(config)
    config = hf_config("seamless_m4t-rotary")
    config.adaptor_stride = 0
    with pytest.raises(ConfigError, match="adaptor_stride=0 must be an integer >= 1"):
        SeamlessM4TConfig.from_hf(config)


def test_seamless_m4t_builds_from_a_full_model_checkpoint(tmp_path):
    """Hub checkpoints are whole ``SeamlessM4TModel``s: the text encoder, text-to-unit model
    and vocoder are left out (ignored by name), and the speech-to-text graphs still match."""
    import torch
    from transformers import SeamlessM4TForSpeechToText, SeamlessM4TModel

    from mobius.testing import build_with_cli, perturb_parameters
    from mobius_audio.testing._speech_parity import OnnxSpeechToText, compare_speech_to_text

    config = hf_config("seamless_m4t-rotary")
    torch.manual_seed(0)
    model = SeamlessM4TModel(config)
    perturb_parameters(model, 0)
    model.save_pretrained(tmp_path / "hf")
    extractor = SeamlessM4TFeatureExtractor()
    extractor.save_pretrained(tmp_path / "hf")
    onnx_model = OnnxSpeechToText(build_with_cli(tmp_path / "hf", tmp_path / "onnx", "--ep", "cpu"))
    reference = SeamlessM4TForSpeechToText.from_pretrained(
        tmp_path / "hf", attn_implementation="eager", trust_remote_code=False
    ).eval()
    waves = random_audio((0.6, 1.0), extractor.sampling_rate, seed=0)
    inputs = extract_inputs(extractor, waves, extractor.sampling_rate, mask=True)
    prompt = [config.decoder_start_token_id, LANGUAGES["fra"]]
    result = compare_speech_to_text(reference, onnx_model, inputs, prompt, 4, generate=False)
    result.assert_close()
