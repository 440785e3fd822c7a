"""Granite Speech (``audio-language``): parity with transformers, the processor, ``mobius generate``.

One tiny random model (:mod:`_granite_speech_tiny`: every parameter perturbed), saved as
the hub lays it out and built once through the CLI, serves every test:

- the numpy extractor gives transformers' ``GraniteSpeechFeatureExtractor`` features
  (1e-5) and mask, and the numpy processor ``GraniteSpeechProcessor``'s ids, for one clip
  and two, with and without the chat template (transformers' code run with a torch
  MelSpectrogram for torchaudio's, which the workspace does not install);
- a batch of two prompts with clips of different lengths (left padded): the audio
  graph's features, the prefill logits and four cached greedy steps within
  ``PARITY_ATOL`` of PyTorch, the greedy tokens equal;
- ``mobius generate PKG PROMPT --audio A --audio B`` prints transformers'
  ``generate(do_sample=False)`` text;
- bad input (a missing or undecodable file, a clip too short to analyse, placeholders that
  do not match the clips, a LoRA adapter, a broken config) is one line.
"""

from __future__ import annotations

import numpy as np
import pytest
from _cli import broken_config_error, one_line_error
from _granite_speech_tiny import (
    EXTRACTOR,
    MAX_NEW_TOKENS,
    RATE,
    SPECIAL,
    clip,
    save_model,
    tokenizer,
    transformers_processor,
    write_wav,
)

from mobius.cli import main
from mobius.testing import build_with_cli
from mobius_audio.granite_speech_features import GraniteSpeechFeatures, GraniteSpeechInputs
from mobius_audio.testing import (
    check_hub_layout_builds_alike,
    check_validate_passes,
    compare_audio_language,
)

torch = pytest.importorskip("torch")
AUDIO = "<|audio|>"


@pytest.fixture(scope="module")
def hf_processor():
    """transformers' ``GraniteSpeechProcessor`` (its extractor's torchaudio stood in for)."""
    with pytest.MonkeyPatch.context() as patch:
        yield transformers_processor(patch)


@pytest.fixture(scope="module")
def built(tmp_path_factory, hf_processor):
    """``(source dir, package dir, the transformers model)``."""
    root = tmp_path_factory.mktemp("granite_speech")
    model = save_model(root / "src", hf_processor.audio_processor)
    return root / "src", build_with_cli(root / "src", root / "out"), model


def hf_inputs(hf_processor, texts: list[str], clips):
    """transformers' processor on ``texts`` and float32 ``clips`` (torch tensors)."""
    audio = [torch.from_numpy(c) for c in clips]
    return hf_processor(text=texts, audio=audio, return_tensors="pt", padding=True)


def chat(prompt: str, clips: int) -> str:
    messages = [{"role": "user", "content": AUDIO * clips + prompt}]
    return tokenizer().apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def ours(package, prompt, clips, **options):
    from transformers import AutoTokenizer

    made = AutoTokenizer.from_pretrained(package)
    return GraniteSpeechInputs(package, made, made.chat_template)(prompt, clips, **options)


@pytest.mark.parametrize("seconds", [(0.5,), (0.37, 0.81), (0.9, 0.2)])
def test_features_match_transformers(hf_processor, seconds):
    clips = [clip(s, i) for i, s in enumerate(seconds)]
    expected = hf_processor.audio_processor([torch.from_numpy(c) for c in clips])
    got = GraniteSpeechFeatures(dict(EXTRACTOR, sampling_rate=RATE))(clips)
    np.testing.assert_allclose(got["input_features"], expected["input_features"], atol=1e-5)
    np.testing.assert_array_equal(got["input_features_mask"], expected["input_features_mask"])


@pytest.mark.parametrize("chat_template", [True, False])
@pytest.mark.parametrize("seconds", [(0.6,), (0.37, 1.0)])
def test_processor_matches_transformers(built, hf_processor, chat_template, seconds):
    _, package, _ = built
    clips = [clip(s, i) for i, s in enumerate(seconds)]
    prompt = "w5 w6 w7"
    text = chat(prompt, len(clips)) if chat_template else AUDIO * len(clips) + prompt
    expected = hf_inputs(hf_processor, [text], clips)
    got = ours(package, prompt, clips, chat_template=chat_template)
    np.testing.assert_array_equal(got["input_ids"], expected["input_ids"].numpy())
    np.testing.assert_allclose(got["input_features"], expected["input_features"], atol=1e-5)


def test_parity_batch_of_two(built, hf_processor):
    _, package, model = built
    clips = [clip(0.45, 0), clip(1.0, 1)]
    inputs = hf_inputs(hf_processor, [chat("w5", 1), chat("w9 w10 w11 w12", 1)], clips)
    ids = inputs["input_ids"].numpy().astype(np.int64)
    mask = inputs["attention_mask"].numpy().astype(np.int64)
    assert mask[0, 0] == 0 and mask.shape[0] == 2  # different lengths, left padded
    selected = inputs["input_features_mask"].numpy()
    assert not selected.all()  # the shorter clip's tokens are fewer
    audio = {"input_features": inputs["input_features"].numpy(), "input_features_mask": selected}
    with torch.no_grad():
        projected = model.get_audio_features(inputs["input_features"]).pooler_output
    reference = projected.numpy()[selected]
    compare_audio_language(model, package, ids, mask, audio, reference).assert_close()


def transformers_text(model, hf_processor, text: str, clips) -> str:
    inputs = hf_inputs(hf_processor, [text], clips)
    with torch.no_grad():
        out = model.generate(**inputs, do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
    new = out[0, inputs["input_ids"].shape[1] :].tolist()
    return hf_processor.tokenizer.decode(new, skip_special_tokens=True)


def test_generate_through_the_cli(built, hf_processor, tmp_path, capsys):
    _, package, model = built
    paths = [tmp_path / "a.wav", tmp_path / "b.wav"]
    read = [
        write_wav(p, clip(s, i)) for i, (p, s) in enumerate(zip(paths, (0.8, 0.45), strict=True))
    ]
    expected = transformers_text(model, hf_processor, chat("w3 w4", 2), read)
    assert len(set(expected.split())) > 2, expected  # tokens that tell models apart
    args = ["generate", str(package), "w3 w4", "--max-new-tokens", str(MAX_NEW_TOKENS)]
    capsys.readouterr()
    assert main([*args, "--audio", str(paths[0]), "--audio", str(paths[1])]) == 0
    assert capsys.readouterr().out.rstrip("\n") == expected
    # without the chat template: the placeholder goes in front of the prompt
    expected = transformers_text(model, hf_processor, AUDIO + "w3 w4", read[:1])
    assert main([*args, "--audio", str(paths[0]), "--no-chat-template"]) == 0
    assert capsys.readouterr().out.rstrip("\n") == expected


def test_bad_input_is_one_line(built, tmp_path, capsys):
    _, package, _ = built
    args = ["generate", str(package), "w3"]
    err = one_line_error(capsys, *args, "--audio", str(tmp_path / "missing.wav"))
    assert "missing.wav" in err
    garbage = tmp_path / "garbage.wav"
    garbage.write_bytes(b"not audio at all")
    assert "garbage.wav" in one_line_error(capsys, *args, "--audio", str(garbage))
    wav = tmp_path / "short.wav"
    write_wav(wav, clip(0.3, 0))
    plain = ["generate", str(package), f"{AUDIO} {AUDIO} w3", "--no-chat-template"]
    err = one_line_error(capsys, *plain, "--audio", str(wav))
    assert f"2 {AUDIO} placeholder(s) for 1 audio clip(s)" in err
    tiny = tmp_path / "tiny.wav"
    write_wav(tiny, clip(0.01, 0))  # 160 samples: less than half an FFT window
    assert "too short" in one_line_error(capsys, *args, "--audio", str(tiny))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c.update(has_lora_adapter=True), "LoRA adapter"),
        (lambda c: c.update(window_size=7), "window_size 7 is not a multiple of 3"),
        (lambda c: c["encoder_config"].update(context_size=11), "exceeds max_pos_emb"),
        (lambda c: c["projector_config"].update(encoder_hidden_size=16), "encoder_hidden_size"),
        (lambda c: c.update(audio_token_index=-1), "audio_token_id is -1"),
    ],
)
def test_broken_config_is_refused(built, tmp_path, capsys, change, message):
    assert message in broken_config_error(capsys, built[0], tmp_path, change)


def test_transformers_5_layout_builds_the_same_package(built, tmp_path):
    """``model.encoder.*``, ``model.projector.*``, ``model.language_model.*``, ``lm_head.*``
    (transformers 5's names in memory) build the package the hub's layout builds."""
    source, package, _ = built
    renames = {
        "encoder.": "model.encoder.",
        "projector.": "model.projector.",
        "language_model.model.": "model.language_model.",
        "language_model.lm_head.": "lm_head.",
    }
    inputs = ours(package, "w5", [clip(0.4, 2)])
    assert (inputs["input_ids"] == SPECIAL[AUDIO]).sum() == inputs["input_features_mask"].sum()
    check_hub_layout_builds_alike(source, package, tmp_path, renames, inputs)


def test_validate_against_transformers(built, tmp_path):
    """``mobius build --validate``'s check (Granite's own audio sample) passes the package."""
    source, package, _ = built
    check_validate_passes(package, source, tmp_path)
