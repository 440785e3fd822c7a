"""Checks Audio Flamingo 3's and Music Flamingo's tests share: the numpy processor and
``mobius generate`` against transformers' processor and ``generate``.

The model is the tiny one of :mod:`_audioflamingo3_tiny` but initialised with a range of
:data:`INIT_RANGE` (0.02 gives the same greedy tokens whatever the audio and prompt:
0.5 gives tokens that change with both, so the text compared tells inputs apart). The
packages carry no chat template; :data:`TEMPLATE` (a ChatML-like one, each audio item
its ``<sound>``, in content order) is given to both processors, and a copy of the
package holds it as ``chat_template.jinja``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from _audioflamingo3_tiny import MAX_NEW_TOKENS, audio_config, clip, save_model, text_config
from _cli import one_line_error
from _qwen2_audio_tiny import write_wav

from mobius.cli import main
from mobius.testing import build_with_cli

#: The initializer range of the generating model (module docstring).
INIT_RANGE = 0.5

#: A ChatML-like template over the tiny word-level vocabulary (no role words).
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{% if m.content is string %} {{ m.content }}"
    "{% else %}{% for c in m.content %}{% if c.type == 'audio' %} <sound>"
    "{% elif c.type == 'text' %} {{ c.text }}{% endif %}{% endfor %}{% endif %} <|im_end|> "
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>{% endif %}"
)


def sub_configs() -> dict:
    """``audio_config`` and ``text_config`` of the tiny model, at :data:`INIT_RANGE`."""
    return dict(
        audio_config=dict(audio_config(), initializer_range=INIT_RANGE),
        text_config=dict(text_config(), initializer_range=INIT_RANGE),
        initializer_range=INIT_RANGE,
    )


def build(root: Path, model_class, config, made) -> tuple[Path, object]:
    """``(package dir, the transformers model)`` of ``config`` saved with ``made``'s files."""
    model = save_model(root / "src", model_class, config, made)
    return build_with_cli(root / "src", root / "out"), model


def chat(made, prompt: str) -> str:
    """The processor's chat text: the prompt, then one audio item (its transcription layout)."""
    content = [{"type": "text", "text": prompt}, {"type": "audio", "path": "clip0.wav"}]
    messages = [{"role": "user", "content": content}]
    return made.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def check_processor(package: Path, make_processor, inputs_class, seconds) -> None:
    """``inputs_class`` on the package gives transformers' ids, features (1e-5) and mask for
    clips of ``seconds``, with and without the chat template."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(package)
    for index, length in enumerate(seconds):
        samples = [clip(length, index)]
        for template in (TEMPLATE, None):
            made = make_processor(template)
            text = chat(made, "w5 w6") if template else "<sound>w5 w6"
            expected = made(text=[text], audio=samples)
            got = inputs_class(package, tokenizer, template)("w5 w6", samples)
            np.testing.assert_array_equal(got["input_ids"], expected["input_ids"].numpy())
            mask = expected["input_features_mask"].numpy()
            np.testing.assert_array_equal(got["input_features_mask"], mask)
            features = expected["input_features"].numpy()
            np.testing.assert_allclose(got["input_features"], features, atol=1e-5)


def transformers_text(model, made, text: str, samples) -> str:
    """transformers' greedy ``generate`` text of ``text`` and one clip."""
    import torch

    inputs = made(text=[text], audio=[samples])
    with torch.no_grad():
        out = model.generate(**inputs, do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
    new = out[0, inputs["input_ids"].shape[1] :].tolist()
    return made.tokenizer.decode(new, skip_special_tokens=True)


def check_generate(package: Path, model, make_processor, tmp_path: Path, capsys) -> None:
    """``mobius generate PKG PROMPT --audio A`` (A longer than a window) prints transformers'
    text: through a copy of the package holding :data:`TEMPLATE`, and through the package
    (no template: the placeholder in front, as ``--no-chat-template``); a second clip is
    refused in one line."""
    wav = tmp_path / "long.wav"
    samples = write_wav(wav, clip(1.6, 2))
    templated = tmp_path / "templated"
    shutil.copytree(package, templated)
    (templated / "chat_template.jinja").write_text(TEMPLATE, encoding="utf-8")
    made = make_processor(TEMPLATE)
    expected = transformers_text(model, made, chat(made, "w3 w4"), samples)
    options = ["w3 w4", "--audio", str(wav), "--max-new-tokens", str(MAX_NEW_TOKENS)]
    capsys.readouterr()
    assert main(["generate", str(templated), *options]) == 0
    assert capsys.readouterr().out.rstrip("\n") == expected
    expected = transformers_text(model, make_processor(None), "<sound>w3 w4", samples)
    assert main(["generate", str(package), *options]) == 0
    assert capsys.readouterr().out.rstrip("\n") == expected
    assert main(["generate", str(templated), *options, "--no-chat-template"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == expected
    err = one_line_error(capsys, "generate", package, "w3", "--audio", wav, "--audio", wav)
    assert "one audio clip a prompt" in err


def check_python_m_mobius(package: Path, model, make_processor, tmp_path: Path) -> None:
    """``python -m mobius generate`` on a short clip prints transformers' text."""
    wav = tmp_path / "short.wav"
    samples = write_wav(wav, clip(0.8, 3))
    expected = transformers_text(model, make_processor(None), "<sound>w7", samples)
    run = subprocess.run(
        [sys.executable, "-m", "mobius", "generate", str(package), "w7", "--audio", str(wav),
         "--max-new-tokens", str(MAX_NEW_TOKENS)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.rstrip("\n") == expected
