"""Qwen2-Audio (``audio-language``): parity with transformers, the processor, ``mobius generate``.

One tiny random model (:mod:`_qwen2_audio_tiny`: every parameter perturbed), saved as
the hub lays it out and built once through the CLI, serves every test:

- the numpy processor gives transformers' ``Qwen2AudioProcessor`` ids, features (1e-5)
  and mask, for one clip and two, with and without the chat template;
- a batch of two prompts with clips of different lengths (left padded): the audio
  graph's features, the prefill logits and four cached greedy steps within
  ``PARITY_ATOL`` of PyTorch, the greedy tokens equal;
- ``mobius generate PKG PROMPT --audio A --audio B`` prints transformers'
  ``generate(do_sample=False)`` text, and ``python -m mobius generate`` on speech
  (espeak-ng, else a tone) too;
- bad input (a missing file, a clip longer than the window, placeholders that do not
  match the clips, a package of another kind, a broken config) is one line.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest
from _cli import broken_config_error, one_line_error
from _qwen2_audio_tiny import (
    MAX_NEW_TOKENS,
    RATE,
    clip,
    processor,
    save_model,
    write_wav,
)

from mobius.cli import main
from mobius.errors import MobiusError
from mobius.testing import build_with_cli
from mobius_audio.audio_language import AudioLanguageGenerator
from mobius_audio.audio_language_processor import Qwen2AudioInputs
from mobius_audio.testing import (
    check_hub_layout_builds_alike,
    check_validate_passes,
    compare_audio_language,
)

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(source dir, package dir, the transformers model)``."""
    root = tmp_path_factory.mktemp("qwen2_audio")
    model = save_model(root / "src")
    return root / "src", build_with_cli(root / "src", root / "out"), model


def chat(prompt: str, clips: int) -> str:
    content = [{"type": "audio", "audio_url": f"clip{i}"} for i in range(clips)]
    messages = [{"role": "user", "content": [*content, {"type": "text", "text": prompt}]}]
    return processor().apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def ours(package, prompt, clips, **options):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(package)
    return Qwen2AudioInputs(package, tokenizer, tokenizer.chat_template)(prompt, clips, **options)


@pytest.mark.parametrize("chat_template", [True, False])
@pytest.mark.parametrize("seconds", [(0.6,), (0.37, 1.0)])
def test_processor_matches_transformers(built, chat_template, seconds):
    _, package, _ = built
    clips = [clip(s, i) for i, s in enumerate(seconds)]
    prompt = "w5 w6 w7"
    if chat_template:
        text = chat(prompt, len(clips))
    else:
        text = "<|audio_bos|><|AUDIO|><|audio_eos|>" * len(clips) + prompt
    expected = processor()(text=[text], audio=clips, return_tensors="np")
    got = ours(package, prompt, clips, chat_template=chat_template)
    np.testing.assert_array_equal(got["input_ids"], expected["input_ids"])
    np.testing.assert_array_equal(got["feature_attention_mask"], expected["feature_attention_mask"])
    np.testing.assert_allclose(got["input_features"], expected["input_features"], atol=1e-5)


def test_parity_batch_of_two(built):
    _, package, model = built
    clips = [clip(0.55, 0), clip(1.0, 1)]
    texts = [chat("w5", 1), chat("w9 w10 w11 w12", 1)]
    inputs = processor()(text=texts, audio=clips, return_tensors="np", padding=True)
    ids, mask = inputs["input_ids"].astype(np.int64), inputs["attention_mask"].astype(np.int64)
    assert mask[0, 0] == 0 and mask.shape[0] == 2  # different lengths, left padded
    audio = {
        "input_features": inputs["input_features"].astype(np.float32),
        "feature_attention_mask": inputs["feature_attention_mask"].astype(np.int64),
    }
    captured = []
    hook = model.model.multi_modal_projector.register_forward_hook(
        lambda module, args, out: captured.append(out.detach().numpy())
    )
    with torch.no_grad():  # the projected features of the whole window, clip by clip
        model(**{k: torch.from_numpy(v) for k, v in inputs.items() if k != "attention_mask"})
    hook.remove()
    frames = audio["feature_attention_mask"].sum(-1)
    counts = [Qwen2AudioInputs.audio_tokens(int(n)) for n in frames]
    reference = np.concatenate([captured[0][i, :n] for i, n in enumerate(counts)])
    compare_audio_language(model, package, ids, mask, audio, reference).assert_close()


def transformers_text(model, text: str, clips) -> str:
    made = processor()
    inputs = made(text=[text], audio=clips, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
    new = out[0, inputs["input_ids"].shape[1] :].tolist()
    return made.tokenizer.decode(new, skip_special_tokens=True)


def test_generate_through_the_cli(built, tmp_path, capsys):
    _, package, model = built
    paths = [tmp_path / "a.wav", tmp_path / "b.wav"]
    read = [
        write_wav(path, clip(s, i))
        for i, (path, s) in enumerate(zip(paths, (0.8, 0.45), strict=True))
    ]
    expected = transformers_text(model, chat("w3 w4", 2), read)
    args = ["generate", str(package), "w3 w4", "--max-new-tokens", str(MAX_NEW_TOKENS)]
    capsys.readouterr()
    assert main([*args, "--audio", str(paths[0]), "--audio", str(paths[1])]) == 0
    assert capsys.readouterr().out.rstrip("\n") == expected
    # without the chat template: the placeholders go in front of the prompt
    plain = "<|audio_bos|><|AUDIO|><|audio_eos|>w3 w4"
    expected = transformers_text(model, plain, read[:1])
    assert main([*args, "--audio", str(paths[0]), "--no-chat-template"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == expected


def speech_wav(path):
    """espeak-ng's "hello world" when it is installed (0.79 s at 220 words a minute: inside
    the tiny model's one-second window), else a tone; returns the samples at 16 kHz as
    transformers' pipeline would read them (soxr)."""
    if shutil.which("espeak-ng"):
        import soxr

        subprocess.run(["espeak-ng", "-s", "220", "-w", str(path), "hello world"], check=True)
        from mobius_audio.audio_file import decode_audio

        samples, rate = decode_audio(path)
        return soxr.resample(samples.astype(np.float32), rate, RATE, quality="HQ")
    return write_wav(path, clip(0.8, 3))


def test_end_to_end_speech_with_python_m_mobius(built, tmp_path):
    _, package, model = built
    wav = tmp_path / "speech.wav"
    samples = speech_wav(wav)
    assert samples.size <= RATE, "the speech outgrew the one-second window"
    expected = transformers_text(model, chat("w7", 1), [samples])
    run = subprocess.run(
        [sys.executable, "-m", "mobius", "generate", str(package), "w7", "--audio", str(wav),
         "--max-new-tokens", str(MAX_NEW_TOKENS)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.rstrip("\n") == expected


def test_bad_input_is_one_line(built, tmp_path, capsys):
    _, package, _ = built
    args = ["generate", str(package), "w3"]
    err = one_line_error(capsys, *args, "--audio", str(tmp_path / "missing.wav"))
    assert "missing.wav" in err
    garbage = tmp_path / "garbage.wav"
    garbage.write_bytes(b"not audio at all")
    assert "garbage.wav" in one_line_error(capsys, *args, "--audio", str(garbage))
    long = tmp_path / "long.wav"
    write_wav(long, clip(1.5, 0))
    assert "window is 1 s" in one_line_error(capsys, *args, "--audio", str(long))
    plain = ["generate", str(package), "<|AUDIO|> <|AUDIO|> w3", "--no-chat-template"]
    wav = tmp_path / "short.wav"
    write_wav(wav, clip(0.3, 0))
    err = one_line_error(capsys, *plain, "--audio", str(wav))
    assert "2 <|AUDIO|> placeholder(s) for 1 audio clip(s)" in err
    with pytest.raises(MobiusError, match="audio-language package"):
        AudioLanguageGenerator(tmp_path)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c["audio_config"].update(d_model=30), "not a multiple of"),
        (lambda c: c.update(audio_token_index=-3), "audio_token_id is -3"),
        (lambda c: c["audio_config"].update(max_source_positions=0), "max_source_positions is 0"),
    ],
)
def test_broken_config_is_refused(built, tmp_path, capsys, change, message):
    assert message in broken_config_error(capsys, built[0], tmp_path, change)


def test_transformers_5_layout_builds_the_same_package(built, tmp_path):
    """``model.audio_tower.*``, ``model.language_model.*``, ``lm_head.*`` (what transformers 5
    names in memory) build the package the hub's layout builds."""
    source, package, _ = built
    renames = {
        "audio_tower.": "model.audio_tower.",
        "multi_modal_projector.": "model.multi_modal_projector.",
        "language_model.model.": "model.language_model.",
        "language_model.lm_head.": "lm_head.",
    }
    inputs = ours(package, "w5", [clip(0.4, 2)])
    check_hub_layout_builds_alike(source, package, tmp_path, renames, inputs)


def test_validate_against_transformers(built, tmp_path):
    """The ``--validate`` check (its feature-mask path) passes the package."""
    source, package, _ = built
    check_validate_passes(package, source, tmp_path)
