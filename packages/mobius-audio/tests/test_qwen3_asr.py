"""Qwen3-ASR (``audio-language``): a tiny random model's package against transformers.

The audio tower reads 16 mel bins in one-second chunks (``n_window`` 50: 100 frames,
13 states after three stride-2 convolutions) and attends within windows of two chunks
(``n_window_infer`` 200); the text decoder is a two-layer Qwen3; every parameter is
perturbed, the model saved as transformers saves it and built through the CLI
(``--ep default`` and ``--ep cpu``). transformers' ``Qwen3ASRProcessor`` (its own
extractor, the tiny word-level tokenizer) makes a batch of two prompts of different
lengths (left padded): a clip of one partial chunk and one of three chunks and a part
(two attention windows). The audio features, the prefill logits and four cached greedy
steps are within ``PARITY_ATOL``, the greedy tokens those of ``generate(do_sample=False)``.
"""

from __future__ import annotations

import numpy as np
import pytest

from mobius.testing import build_with_cli, tiny_tokenizer
from mobius_audio.testing import check_batch_and_generate, save_perturbed, tone_clip

torch = pytest.importorskip("torch")

VOCAB = 128
SPECIAL = {
    "<|audio_pad|>": 100,
    "<|audio_start|>": 101,
    "<|audio_end|>": 102,
    "<|im_start|>": 103,
    "<|im_end|>": 104,
    "<|endoftext|>": 105,
}
NAMED = {
    "audio_token": "<|audio_pad|>",
    "audio_bos_token": "<|audio_start|>",
    "audio_eos_token": "<|audio_end|>",
}
RATE = 16000


def hf_config():
    from transformers import Qwen3ASRConfig

    audio = dict(
        model_type="qwen3_asr_encoder", num_mel_bins=16, d_model=32, encoder_layers=2,
        encoder_attention_heads=4, encoder_ffn_dim=64, downsample_hidden_size=8,
        output_dim=32, n_window=50, n_window_infer=200, max_position_embeddings=13,
    )  # fmt: skip
    text = dict(
        model_type="qwen3", vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        max_position_embeddings=512, eos_token_id=SPECIAL["<|im_end|>"],
    )  # fmt: skip
    return Qwen3ASRConfig(
        audio_config=audio, text_config=text, audio_token_id=SPECIAL["<|audio_pad|>"],
        pad_token_id=SPECIAL["<|endoftext|>"], eos_token_id=SPECIAL["<|im_end|>"],
    )  # fmt: skip


def processor():
    """transformers' ``Qwen3ASRProcessor`` over its extractor (16 mel bins)."""
    from transformers import Qwen3ASRFeatureExtractor, Qwen3ASRProcessor

    extractor = Qwen3ASRFeatureExtractor(feature_size=16, sampling_rate=RATE)
    return Qwen3ASRProcessor(extractor, tiny_tokenizer(VOCAB, SPECIAL, NAMED))


clip = tone_clip


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    from transformers import Qwen3ASRForConditionalGeneration

    root = tmp_path_factory.mktemp("qwen3_asr")
    return root, save_perturbed(Qwen3ASRForConditionalGeneration, hf_config(), root / "src")


@pytest.fixture(scope="module", params=["default", "cpu"])
def built(source, request):
    """The package at ``--ep default`` (standard ops) and ``--ep cpu`` (ORT's fused ones)."""
    root, model = source
    out = root / f"out-{request.param}"
    return build_with_cli(root / "src", out, "--ep", request.param), model


def test_parity_batch_of_two(built):
    package, model = built
    audio_prompt = "<|im_start|><|audio_start|><|audio_pad|><|audio_end|>"
    texts = [f"{audio_prompt}w5<|im_end|>", f"{audio_prompt}w9 w10 w11 w12<|im_end|>"]
    inputs = processor()(text=texts, audio=[clip(0.55, 0), clip(3.3, 1)])
    ids, mask = inputs["input_ids"].numpy(), inputs["attention_mask"].numpy()
    assert mask[0, 0] == 0 and inputs["input_features"].shape[-1] == 400  # padded; 4 chunks
    audio = {
        "input_features": inputs["input_features"].numpy().astype(np.float32),
        "input_features_mask": inputs["input_features_mask"].numpy().astype(np.int64),
    }
    check_batch_and_generate(
        model, package, ids, mask, audio, pad_token_id=SPECIAL["<|endoftext|>"]
    )
