"""GLM-ASR (``audio-language``): a tiny random model's package against transformers.

The audio tower reads 16 mel bins over two-second windows (200 frames, 100 states
stacked by four: 25 tokens a window), rotating half of each head's channels; the text
decoder is a two-layer Llama; every parameter is perturbed, the model saved as
transformers saves it and built through the CLI (``--ep default`` and ``--ep cpu``).
transformers' ``GlmAsrProcessor`` (a Whisper extractor, the tiny word-level tokenizer)
makes a batch of two prompts of different lengths (left padded), one clip of one
window and one of two: the audio features, the prefill logits and four cached greedy
steps within ``PARITY_ATOL``, the greedy tokens those of ``generate(do_sample=False)``.
"""

from __future__ import annotations

import numpy as np
import pytest

from mobius.testing import build_with_cli, tiny_tokenizer
from mobius_audio.testing import check_batch_and_generate, save_perturbed, tone_clip

torch = pytest.importorskip("torch")

VOCAB = 128
SPECIAL = {"<|pad|>": 100, "<|user|>": 101, "<|assistant|>": 102, "<|endoftext|>": 103}
RATE = 16000


def hf_config():
    from transformers import GlmAsrConfig

    audio = dict(
        model_type="glmasr_encoder", hidden_size=32, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, num_mel_bins=16,
    )  # fmt: skip
    text = dict(
        model_type="llama", vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        max_position_embeddings=256, rms_norm_eps=1e-5, eos_token_id=SPECIAL["<|endoftext|>"],
    )  # fmt: skip
    return GlmAsrConfig(audio_config=audio, text_config=text, audio_token_id=SPECIAL["<|pad|>"])


def processor():
    """transformers' ``GlmAsrProcessor`` over a two-second Whisper extractor."""
    from transformers import GlmAsrProcessor, WhisperFeatureExtractor

    extractor = WhisperFeatureExtractor(feature_size=16, chunk_length=2, sampling_rate=RATE)
    return GlmAsrProcessor(extractor, tiny_tokenizer(VOCAB, SPECIAL))


clip = tone_clip


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    from transformers import GlmAsrForConditionalGeneration

    root = tmp_path_factory.mktemp("glmasr")
    return root, save_perturbed(GlmAsrForConditionalGeneration, hf_config(), root / "src")


@pytest.fixture(scope="module", params=["default", "cpu"])
def built(source, request):
    """The package at ``--ep default`` (standard ops) and ``--ep cpu`` (ORT's fused ones)."""
    root, model = source
    out = root / f"out-{request.param}"
    return build_with_cli(root / "src", out, "--ep", request.param), model


def test_parity_batch_of_two(built):
    package, model = built
    texts = ["<|user|><|pad|>w5<|assistant|>", "<|user|><|pad|>w9 w10 w11 w12<|assistant|>"]
    inputs = processor()(text=texts, audio=[clip(0.55, 0), clip(2.6, 1)])
    ids, mask = inputs["input_ids"].numpy(), inputs["attention_mask"].numpy()
    assert mask[0, 0] == 0 and inputs["input_features"].shape[0] == 3  # padded; 1 + 2 windows
    audio = {
        "input_features": inputs["input_features"].numpy().astype(np.float32),
        "input_features_mask": inputs["input_features_mask"].numpy().astype(np.int64),
    }
    check_batch_and_generate(
        model, package, ids, mask, audio, pad_token_id=SPECIAL["<|endoftext|>"]
    )
