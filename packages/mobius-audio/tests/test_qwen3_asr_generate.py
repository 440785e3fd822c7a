"""Qwen3-ASR's numpy processor, ``mobius generate`` and ``--validate`` against transformers.

The tiny random model of :mod:`test_qwen3_asr` (one-second chunks, 16 mel bins), saved
with its tokenizer (a Qwen-like chat template) and extractor, built once through the CLI:

- :class:`~mobius_audio.qwen3_asr_features.Qwen3AsrInputs` gives ``Qwen3ASRProcessor``'s
  ids, features (1e-5) and mask for a clip under ``min_length`` and one of three chunks
  and a part, with and without the chat template;
- ``mobius generate PKG PROMPT --audio A`` prints transformers' ``generate(do_sample=False)``
  text (``python -m mobius`` too), and a second clip is refused in one line;
- ``--validate`` passes against transformers.
"""

from __future__ import annotations

import numpy as np
import pytest
from _cli import one_line_error
from _qwen2_audio_tiny import write_wav
from test_qwen3_asr import NAMED, SPECIAL, VOCAB, clip, hf_config

from mobius.cli import main
from mobius.testing import build_with_cli, tiny_tokenizer
from mobius_audio.qwen3_asr_features import Qwen3AsrInputs
from mobius_audio.testing import (
    check_python_m_generate,
    check_validate_passes,
    save_perturbed,
    transformers_text,
)

torch = pytest.importorskip("torch")

MAX_NEW_TOKENS = 8
TOKENS = {**SPECIAL, "<|system|>": 106, "<|user|>": 107, "<|assistant|>": 108}
#: A Qwen-like template (roles as tokens: the tiny tokenizer splits on whitespace).
TEMPLATE = (
    "{% for m in messages %}<|im_start|><|{{ m.role }}|>{% if m.content is string %}"
    "{{ m.content }}{% else %}{% for c in m.content %}{% if c.type == 'audio' %}"
    "<|audio_start|><|audio_pad|><|audio_end|>{% elif c.type == 'text' %}{{ c.text }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|><|assistant|>{% endif %}"
)
PLAIN = "<|audio_start|><|audio_pad|><|audio_end|>"


def processor(chat_template: bool = True):
    """transformers' ``Qwen3ASRProcessor`` over its extractor (16 mel bins)."""
    from transformers import Qwen3ASRFeatureExtractor, Qwen3ASRProcessor

    extractor = Qwen3ASRFeatureExtractor(feature_size=16, sampling_rate=16000)
    template = TEMPLATE if chat_template else None
    tokenizer = tiny_tokenizer(VOCAB, TOKENS, NAMED)
    return Qwen3ASRProcessor(extractor, tokenizer, chat_template=template)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(source dir, package dir, the transformers model)``."""
    from transformers import Qwen3ASRForConditionalGeneration

    root = tmp_path_factory.mktemp("qwen3_asr_generate")
    config = hf_config()
    config.text_config.initializer_range = 0.3  # greedy tokens that vary (0.02: one repeated)

    def stop_tokens(model):
        model.generation_config.eos_token_id = SPECIAL["<|im_end|>"]
        model.generation_config.pad_token_id = SPECIAL["<|endoftext|>"]

    model = save_perturbed(
        Qwen3ASRForConditionalGeneration, config, root / "src", prepare=stop_tokens
    )
    made = processor()
    made.tokenizer.chat_template = TEMPLATE  # as a hub tokenizer_config.json holds it
    made.tokenizer.save_pretrained(root / "src")
    made.feature_extractor.save_pretrained(root / "src")
    return root / "src", build_with_cli(root / "src", root / "out"), model


def chat(prompt: str) -> str:
    content = [{"type": "audio", "path": "clip0.wav"}, {"type": "text", "text": prompt}]
    messages = [{"role": "user", "content": content}]
    return processor().apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def ours(package, prompt, clips, **options):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(package)
    return Qwen3AsrInputs(package, tokenizer, tokenizer.chat_template)(prompt, clips, **options)


@pytest.mark.parametrize("chat_template", [True, False])
@pytest.mark.parametrize("seconds", [0.3, 3.3])
def test_processor_matches_transformers(built, chat_template, seconds):
    _, package, _ = built
    clips = [clip(seconds, 1)]
    prompt = "w5 w6 w7"
    text = chat(prompt) if chat_template else PLAIN + prompt
    expected = processor()(text=[text], audio=clips)
    got = ours(package, prompt, clips, chat_template=chat_template)
    assert got["input_features"].shape[-1] == (100 if seconds < 1 else 400)  # chunks
    np.testing.assert_array_equal(got["input_ids"], expected["input_ids"].numpy())
    mask = expected["input_features_mask"].numpy()
    np.testing.assert_array_equal(got["input_features_mask"], mask)
    features = expected["input_features"].numpy()
    np.testing.assert_allclose(got["input_features"], features, atol=1e-5)


def reference_text(model, text: str, clips) -> str:
    return transformers_text(model, processor(), text, clips, MAX_NEW_TOKENS)


def test_generate_through_the_cli(built, tmp_path, capsys):
    _, package, model = built
    wav = tmp_path / "two_chunks.wav"
    read = write_wav(wav, clip(1.7, 2))
    args = ["generate", str(package), "w3 w4", "--max-new-tokens", str(MAX_NEW_TOKENS)]
    expected = reference_text(model, chat("w3 w4"), [read])
    capsys.readouterr()
    assert main([*args, "--audio", str(wav)]) == 0
    assert capsys.readouterr().out.rstrip("\n") == expected
    # without the chat template: the audio markers go in front of the prompt
    expected = reference_text(model, PLAIN + "w3 w4", [read])
    assert main([*args, "--audio", str(wav), "--no-chat-template"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == expected
    err = one_line_error(capsys, *args, "--audio", wav, "--audio", wav)
    assert "one audio clip a prompt" in err


def test_python_m_mobius_generate(built, tmp_path):
    _, package, model = built
    wav = tmp_path / "short.wav"
    samples = write_wav(wav, clip(0.8, 3))
    expected = reference_text(model, chat("w7"), [samples])
    check_python_m_generate(package, "w7", wav, expected, MAX_NEW_TOKENS)


def test_validate_against_transformers(built, tmp_path):
    source, package, _ = built
    check_validate_passes(package, source, tmp_path)
