"""Voxtral's ``mobius generate``: mistral-common's Tekken prompts against transformers.

One tiny random Voxtral (:mod:`_voxtral_tiny`: every parameter perturbed, a tiny
``tekken.json``), saved as the hub lays it out and built once through the CLI, serves
every test:

- the numpy processor gives transformers' ``VoxtralProcessor`` ids and features (1e-5)
  for a chat prompt with two clips of different lengths (several chunks each) and for a
  transcription request;
- ``mobius generate PKG PROMPT --audio A --audio B`` prints the text of transformers'
  ``generate(do_sample=False)`` on ``apply_chat_template``, and the runner's tokens are
  its tokens; ``mobius generate PKG clip.wav --language en`` (and ``--task transcribe``)
  the text of ``generate`` on ``apply_transcription_request``;
- the build keeps ``tekken.json``; a hub snapshot without it fetches it;
- bad input (a missing or undecodable audio file, a broken tekken.json, a language code that
  is not one, options a transcription does not take, a system message with audio) is one
  line; a package without tekken.json is
  ``test_voxtral_parity.py``'s (it runs without mistral-common).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from _cli import one_line_error
from _voxtral_tiny import AUDIO_KWARGS, MAX_NEW_TOKENS, clip, processor, save_model, write_wav

from mobius.cli import main
from mobius.testing import build_with_cli

torch = pytest.importorskip("torch")
pytest.importorskip("mistral_common", reason="Voxtral's tokenizer needs mistral-common")

PROMPT = "what is the thing"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(source dir, package dir, transformers model, transformers processor, wav paths)``."""
    root = tmp_path_factory.mktemp("voxtral")
    model = save_model(root / "src")
    package = build_with_cli(root / "src", root / "out")
    # two clips of different lengths: 2 and 3 chunks of 0.4 s
    paths = [root / "a.wav", root / "b.wav"]
    for seed, (path, seconds) in enumerate(zip(paths, (0.55, 1.1), strict=True)):
        write_wav(path, clip(seconds, seed))
    return root / "src", package, model, processor(root / "src"), paths


def hf_chat(hf_processor, paths, text: str, system: str | None = None):
    content = [{"type": "audio", "path": str(p)} for p in paths] + [{"type": "text", "text": text}]
    conversation = [{"role": "user", "content": content}]
    if system is not None:
        conversation.insert(0, {"role": "system", "content": system})
    kwargs = {"audio_kwargs": AUDIO_KWARGS}
    return hf_processor.apply_chat_template(conversation, processor_kwargs=kwargs)


def hf_transcription(hf_processor, path, language):
    return hf_processor.apply_transcription_request(
        audio=str(path), model_id="voxtral", language=language, audio_kwargs=AUDIO_KWARGS
    )


def hf_generate(model, hf_processor, inputs) -> tuple[list[int], str]:
    with torch.no_grad():
        out = model.generate(**inputs, do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
    new = out[0, inputs["input_ids"].shape[1] :].tolist()
    return new, hf_processor.decode(new, skip_special_tokens=True)


def generator(package):
    from mobius_audio.voxtral_generate import VoxtralGenerator

    return VoxtralGenerator(package)


def test_processor_matches_transformers(built):
    _, package, _, hf_processor, paths = built
    ours = generator(package)
    clips = ours.read_audios(paths)
    cases = [
        (hf_chat(hf_processor, paths, PROMPT), ours.processor.chat(PROMPT, clips)),
        (hf_transcription(hf_processor, paths[1], "en"), ours.processor.transcription(clips[1], "en")),
        (hf_transcription(hf_processor, paths[0], None), ours.processor.transcription(clips[0])),
    ]  # fmt: skip
    for expected, got in cases:
        np.testing.assert_array_equal(got["input_ids"], expected["input_ids"].numpy())
        np.testing.assert_allclose(got["input_features"], expected["input_features"], atol=1e-5)
    assert len(cases[0][1]["input_features"]) == 5  # 2 + 3 chunks, in the clips' order
    # text alone (a system message is refused with audio before tokenizer v13): no features
    conversation = [{"role": "system", "content": "be brief"}, {"role": "user", "content": PROMPT}]
    expected = hf_processor.apply_chat_template(conversation)
    got = ours.processor.chat(PROMPT, [], system="be brief")
    assert list(got) == ["input_ids"]
    np.testing.assert_array_equal(got["input_ids"], expected["input_ids"].numpy())


def test_chat_through_the_cli(built, capsys):
    _, package, model, hf_processor, paths = built
    inputs = hf_chat(hf_processor, paths, PROMPT)
    tokens, expected = hf_generate(model, hf_processor, inputs)
    assert len(set(tokens)) > 2 and expected, tokens  # tokens that tell models apart
    ours = generator(package)
    feeds = ours.processor.chat(PROMPT, ours.read_audios(paths))
    assert list(ours.generate_from_inputs(feeds, max_new_tokens=MAX_NEW_TOKENS)) == tokens
    # the answer hears the audio: the chunks in another order answer otherwise
    reordered = dict(feeds, input_features=feeds["input_features"][::-1].copy())
    assert list(ours.generate_from_inputs(reordered, max_new_tokens=MAX_NEW_TOKENS)) != tokens
    args = ["generate", package, PROMPT, "--max-new-tokens", MAX_NEW_TOKENS]
    capsys.readouterr()
    assert main([str(a) for a in (*args, "--audio", paths[0], "--audio", paths[1])]) == 0
    assert capsys.readouterr().out.rstrip("\n") == expected
    # a text-only prompt feeds the audio graph nothing
    inputs = hf_processor.apply_chat_template([{"role": "user", "content": PROMPT}])
    _, expected = hf_generate(model, hf_processor, inputs)
    assert main([str(a) for a in args]) == 0
    assert capsys.readouterr().out.rstrip("\n") == expected


@pytest.mark.parametrize("option", [("--language", "en"), ("--task", "transcribe")])
def test_transcription_through_the_cli(built, capsys, option):
    _, package, model, hf_processor, paths = built
    language = option[1] if option[0] == "--language" else None
    inputs = hf_transcription(hf_processor, paths[1], language)
    tokens, expected = hf_generate(model, hf_processor, inputs)
    assert len(set(tokens)) > 2 and expected, tokens
    capsys.readouterr()
    args = ["generate", package, paths[1], *option, "--max-new-tokens", MAX_NEW_TOKENS]
    assert main([str(a) for a in args]) == 0
    assert capsys.readouterr().out.rstrip("\n") == expected


def test_the_package_keeps_tekken_and_the_hub_fetches_it(built, tmp_path):
    from mobius_audio.voxtral_source import hub_files

    source, package, *_ = built
    assert (package / "tekken.json").read_bytes() == (source / "tekken.json").read_bytes()
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    shutil.copy(source / "config.json", snapshot)
    assert hub_files(snapshot, False) == (["tekken.json"], [])
    shutil.copy(source / "tekken.json", snapshot)
    assert hub_files(snapshot, False) is None  # already there
    assert hub_files(package.parent, False) is None  # not a Voxtral directory


def test_bad_input_is_one_line(built, tmp_path, capsys):
    _, package, _, _, paths = built
    chat = ["generate", package, PROMPT]
    err = one_line_error(capsys, *chat, "--audio", tmp_path / "missing.wav")
    assert "missing.wav" in err
    garbage = tmp_path / "garbage.wav"
    garbage.write_bytes(b"not audio at all")
    assert "garbage.wav" in one_line_error(capsys, *chat, "--audio", garbage)
    assert "garbage.wav" in one_line_error(capsys, "generate", package, garbage, "--language", "en")
    err = one_line_error(capsys, "generate", package, paths[0], "--language", "xx")
    assert "--language 'xx' is not an ISO 639-1 code" in err
    err = one_line_error(capsys, "generate", package, paths[0], "--task", "translate")
    assert "no translate task" in err
    err = one_line_error(
        capsys, "generate", package, paths[0], "--language", "en", "--audio", paths[1]
    )
    assert "--audio is for chat prompts" in err
    assert "--no-chat-template" in one_line_error(capsys, *chat, "--no-chat-template")
    broken = shutil.copytree(package, tmp_path / "broken")
    (broken / "tekken.json").write_text('{"config": {"version": "v99"}}')
    err = one_line_error(capsys, "generate", broken, PROMPT)
    assert f"cannot load {broken / 'tekken.json'}: Unknown version: v99" in err
    err = one_line_error(capsys, *chat, "--audio", paths[0], "--system", "be brief")
    assert "mistral-common refuses the request: Found system messages" in err
