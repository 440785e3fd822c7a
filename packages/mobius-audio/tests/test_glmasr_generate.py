"""GLM-ASR's numpy processor, ``mobius generate`` and ``--validate`` against transformers.

The tiny random model of :mod:`test_glmasr` (two-second windows, 16 mel bins), saved with
its tokenizer (a GLM-like chat template) and Whisper extractor, built once through the CLI:

- :class:`~mobius_audio.glmasr_features.GlmAsrInputs` gives ``GlmAsrProcessor``'s ids,
  features (1e-5) and mask for a clip of one window and one of two, with and without
  the chat template;
- ``mobius generate PKG PROMPT --audio A`` prints transformers' ``generate(do_sample=False)``
  text (``python -m mobius`` too), and a second clip is refused in one line;
- ``--validate`` passes against transformers.
"""

from __future__ import annotations

import numpy as np
import pytest
from _cli import one_line_error
from _qwen2_audio_tiny import write_wav
from test_glmasr import SPECIAL, VOCAB, clip, hf_config

from mobius.cli import main
from mobius.testing import build_with_cli, tiny_tokenizer
from mobius_audio.glmasr_features import GlmAsrInputs
from mobius_audio.testing import (
    check_python_m_generate,
    check_validate_passes,
    save_perturbed,
    transformers_text,
)

torch = pytest.importorskip("torch")

MAX_NEW_TOKENS = 8
TOKENS = {**SPECIAL, "<|system|>": 104, "<|begin_of_audio|>": 105, "<|end_of_audio|>": 106}
#: A GLM-ASR-like template: each audio item is its placeholder between audio markers.
TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{% if m.content is string %}{{ m.content }}"
    "{% else %}{% for c in m.content %}{% if c.type == 'audio' %}"
    "<|begin_of_audio|><|pad|><|end_of_audio|>{% elif c.type == 'text' %} {{ c.text }}"
    "{% endif %}{% endfor %}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def processor(chat_template: bool = True):
    """transformers' ``GlmAsrProcessor`` over a two-second Whisper extractor."""
    from transformers import GlmAsrProcessor, WhisperFeatureExtractor

    extractor = WhisperFeatureExtractor(feature_size=16, chunk_length=2, sampling_rate=16000)
    template = TEMPLATE if chat_template else None
    return GlmAsrProcessor(extractor, tiny_tokenizer(VOCAB, TOKENS), chat_template=template)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(source dir, package dir, the transformers model)``."""
    from transformers import GlmAsrForConditionalGeneration

    root = tmp_path_factory.mktemp("glmasr_generate")
    config = hf_config()
    config.text_config.initializer_range = 0.2  # greedy tokens that vary (0.02: one repeated)

    def stop_tokens(model):
        model.generation_config.eos_token_id = SPECIAL["<|endoftext|>"]
        model.generation_config.pad_token_id = SPECIAL["<|endoftext|>"]

    model = save_perturbed(
        GlmAsrForConditionalGeneration, config, root / "src", prepare=stop_tokens
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
    return GlmAsrInputs(package, tokenizer, tokenizer.chat_template)(prompt, clips, **options)


@pytest.mark.parametrize("chat_template", [True, False])
@pytest.mark.parametrize("seconds", [0.55, 2.6])
def test_processor_matches_transformers(built, chat_template, seconds):
    _, package, _ = built
    clips = [clip(seconds, 1)]
    prompt = "w5 w6 w7"
    text = chat(prompt) if chat_template else "<|pad|>" + prompt
    expected = processor()(text=[text], audio=clips)
    got = ours(package, prompt, clips, chat_template=chat_template)
    assert got["input_features"].shape[0] == (1 if seconds < 2 else 2)  # windows
    np.testing.assert_array_equal(got["input_ids"], expected["input_ids"].numpy())
    mask = expected["input_features_mask"].numpy()
    np.testing.assert_array_equal(got["input_features_mask"], mask)
    features = expected["input_features"].numpy()
    np.testing.assert_allclose(got["input_features"], features, atol=1e-5)


def reference_text(model, text: str, clips) -> str:
    return transformers_text(model, processor(), text, clips, MAX_NEW_TOKENS)


def test_generate_through_the_cli(built, tmp_path, capsys):
    _, package, model = built
    wav = tmp_path / "two_windows.wav"
    read = write_wav(wav, clip(2.6, 2))
    args = ["generate", str(package), "w3 w4", "--max-new-tokens", str(MAX_NEW_TOKENS)]
    expected = reference_text(model, chat("w3 w4"), [read])
    capsys.readouterr()
    assert main([*args, "--audio", str(wav)]) == 0
    assert capsys.readouterr().out.rstrip("\n") == expected
    # without the chat template: the placeholder goes in front of the prompt
    expected = reference_text(model, "<|pad|>w3 w4", [read])
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
